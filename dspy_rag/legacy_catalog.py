"""The catalog format before SQLite: one JSON file (`catalog.json`, format 1), read once to migrate it."""

import json
from pathlib import Path
from typing import Any

from dspy_rag.errors import UserError

LEGACY_FORMAT = 1
CHUNK_FIELDS = {"source": str, "section": str, "start": int, "end": int, "text": str, "tokens": str}


def well_formed(catalog: dict[str, Any]) -> bool:
    """Every field a reader relies on is there, with its type: a damaged catalog is refused, never half-used."""
    if not (isinstance(catalog.get("embedding_model"), str) and isinstance(catalog.get("collection"), str | None)
            and isinstance(catalog.get("sources"), dict) and isinstance(catalog.get("chunks"), dict)):
        return False
    sources_ok = all(isinstance(meta, dict) and isinstance(meta.get("sha256"), str)
                     and isinstance(meta.get("sections"), list) for meta in catalog["sources"].values())
    return sources_ok and all(isinstance(row, dict) and all(isinstance(row.get(k), t) for k, t in CHUNK_FIELDS.items())
                              for row in catalog["chunks"].values())


def read_legacy(path: Path) -> dict[str, Any]:
    """A format-1 catalog, checked whole: unreadable, foreign or damaged ones are refused with what to do."""
    try:
        catalog = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError) as exc:
        raise UserError(f"index catalog {path} is unreadable ({exc}); re-ingest into a new --index") from exc
    if not isinstance(catalog, dict) or catalog.get("format") != LEGACY_FORMAT:
        raise UserError(f"{path} is not a dspy-rag index of format {LEGACY_FORMAT}; use another --index")
    if not well_formed(catalog):
        raise UserError(f"index catalog {path} is damaged (fields missing or of the wrong type); "
                        "re-ingest into a new --index")
    return catalog
