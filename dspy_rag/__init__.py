"""dspy-rag: a deep-thinking research assistant over your documents and the web, as a DSPy program.

The Python API (see `dspy_rag.api`): `Research.open()` then `research.ask(question)`; `load_config` for the
configuration, `Index` for an index of your own. Imported on first use, so `import dspy_rag` stays light.
"""

from typing import Any

__version__ = "0.1.0"
__all__ = ["Index", "Research", "UserError", "__version__", "load_config"]

_EXPORTS = {"Research": "dspy_rag.api", "load_config": "dspy_rag.config", "Index": "dspy_rag.index",
            "UserError": "dspy_rag.errors"}


def __getattr__(name: str) -> Any:
    if name not in _EXPORTS:
        raise AttributeError(f"module 'dspy_rag' has no attribute {name!r}")
    import importlib

    return getattr(importlib.import_module(_EXPORTS[name]), name)
