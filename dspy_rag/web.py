"""Web search behind one interface: Tavily (live), an offline snapshot searched like the index, or off.

A provider failure (bad key, rate limit, timeout, no network) raises `WebSearchError` with a one-line
reason; the research records it and goes on with what it has.
"""

import hashlib
import json
import math
import re
import stat
from pathlib import Path
from typing import Any, Protocol

from dspy_rag import paths
from dspy_rag.config import Config, IndexConfig
from dspy_rag.documents import Document, Section, kind_of, parse, read_bytes
from dspy_rag.errors import UserError, redact
from dspy_rag.files import cache_root
from dspy_rag.index import Index
from dspy_rag.retrieval import Passage, Retriever

SNAPSHOT_SUFFIXES = (".jsonl", ".md", ".markdown", ".txt", ".htm", ".html")


class WebSearchError(Exception):
    """A provider failure the research goes on without."""


class WebSearch(Protocol):
    name: str

    def search(self, query: str, k: int) -> list[Passage]: ...


def dated_label(title: str, date: str | None) -> str:
    """Web pages cite as [title (date)]."""
    return f"{title} ({date})" if date else title


def _day(timestamp: str | None) -> str | None:
    """'2023-09-26T17:01:22+00:00' -> '2023-09-26'."""
    return timestamp[:10] if timestamp else None


def web_passage(url: str, title: str, published: str | None, text: str, score: float) -> Passage:
    """A web result, with its url as the source."""
    return Passage(f"web-{hashlib.sha256(url.encode()).hexdigest()[:16]}", text, url,
                   dated_label(title, _day(published)), score)


class TavilySearch:
    name = "tavily"

    def __init__(self, api_key: str, base_url: str | None = None, timeout: float = 20.0) -> None:
        from tavily import TavilyClient

        self.client = TavilyClient(api_key=api_key, api_base_url=base_url)
        self.timeout = timeout

    def search(self, query: str, k: int) -> list[Passage]:
        import requests
        from tavily import errors

        try:
            response = self.client.search(query, max_results=k, timeout=self.timeout)
        except errors.InvalidAPIKeyError as exc:
            raise WebSearchError("Tavily rejected the API key (HTTP 401); check TAVILY_API_KEY") from exc
        except errors.UsageLimitExceededError as exc:
            raise WebSearchError("Tavily usage limit reached (HTTP 429); retry later or use --web PATH") from exc
        except errors.ForbiddenError as exc:
            raise WebSearchError("Tavily refused the request (HTTP 403); check the key's plan") from exc
        except errors.BadRequestError as exc:
            raise WebSearchError(f"Tavily refused the query (HTTP 400): {redact(str(exc))}") from exc
        except errors.TimeoutError as exc:
            raise WebSearchError(f"Tavily did not answer within {self.timeout:.0f} s") from exc
        except requests.ConnectionError as exc:
            raise WebSearchError("cannot reach Tavily (no network?); use --web PATH for an offline snapshot") from exc
        except requests.RequestException as exc:
            raise WebSearchError(f"Tavily failed: {type(exc).__name__}") from exc
        except (AttributeError, TypeError, ValueError, KeyError) as exc:  # the client read a reply of another shape
            raise WebSearchError(f"Tavily's reply is malformed: the client could not read it ({type(exc).__name__})"
                                 ) from exc
        return tavily_passages(response)


def _text(result: dict[str, Any], name: str) -> str | None:
    value = result.get(name)
    if value is not None and not isinstance(value, str):
        raise WebSearchError(f"Tavily's reply is malformed: a result's {name} is {type(value).__name__}, not text")
    return value


def tavily_passages(response: Any) -> list[Passage]:
    """The passages of a Tavily reply, checked field by field: a reply of another shape (from a gateway or a
    proxy) is a reported web failure, not a crash."""
    results = response.get("results", []) if isinstance(response, dict) else response
    if results is None:
        return []
    if not isinstance(results, list):
        raise WebSearchError(f"Tavily's reply is malformed: results is {type(results).__name__}, not a list")
    passages = []
    for result in results:
        if not isinstance(result, dict):
            raise WebSearchError(f"Tavily's reply is malformed: a result is {type(result).__name__}, not an object")
        url, score = _text(result, "url"), result.get("score")
        if score is not None and (isinstance(score, bool) or not isinstance(score, int | float)
                                  or not math.isfinite(score)):
            raise WebSearchError(f"Tavily's reply is malformed: a result's score is {score!r:.40}, not a number")
        if url:
            passages.append(web_passage(url, _text(result, "title") or url, _text(result, "published_date"),
                                        _text(result, "content") or "", float(score or 0.0)))
    return passages


_FRONT_MATTER = re.compile(r"\A---\n(.*?)\n---\n", re.S)


def _front_matter(text: str) -> dict[str, str]:
    match = _FRONT_MATTER.match(text)
    if not match:
        return {}
    pairs = (line.split(":", 1) for line in match.group(1).splitlines() if ":" in line and not line.startswith(" "))
    return {key.strip(): value.strip().strip('"') for key, value in pairs}


def _whole(source: str, kind: str, text: str, title: str) -> Document:
    return Document(source, kind, text, (Section(title, 0, len(text)),))


def snapshot_documents(files: list[Path]) -> list[Document]:
    """JSONL lines (url, title, published_at, content) and standalone pages, one section each."""
    documents = []
    for file in files:
        if file.suffix == ".jsonl":
            try:
                lines = file.read_text(encoding="utf-8").splitlines()
            except UnicodeDecodeError as exc:
                raise UserError(f"{file} is not UTF-8 text; save the snapshot as UTF-8 JSON lines") from exc
            for number, line in enumerate(lines, start=1):
                if not line.strip():
                    continue
                try:
                    record: dict[str, Any] = json.loads(line)
                    url, content = record["url"], record["content"]
                except (ValueError, KeyError, TypeError) as exc:
                    raise UserError(f"{file}:{number} is not a snapshot record with url and content; write each line "
                                    "as a JSON object with both") from exc
                title = record.get("title") or url
                published = record.get("published_at") or record.get("published_date")
                documents.append(_whole(url, "web", f"{title}\n{content}", dated_label(title, _day(published))))
        else:
            text = parse(read_bytes(file), str(file.resolve()), kind_of(file)).text
            meta = _front_matter(text)
            title = meta.get("blog_title") or meta.get("title") or file.stem
            documents.append(_whole(str(file.resolve()), "web", _FRONT_MATTER.sub("", text),
                                    dated_label(title, meta.get("date"))))
    return documents


def _a_page(file: Path) -> bool:
    """A file of a snapshot folder worth reading, as `ingest` reads a folder: regular and not empty (a pipe would
    block, a dangling link or an empty page holds nothing)."""
    try:
        info = file.stat()
    except OSError:
        return False
    return stat.S_ISREG(info.st_mode) and info.st_size > 0


class SnapshotSearch:
    """An offline stand-in for the web: the snapshot is indexed once (cached by content) and searched hybrid."""

    name = "snapshot"

    def __init__(self, path: Path, config: Config) -> None:
        if not paths.named(path, "web snapshot").exists():
            raise UserError(f"web snapshot {path} does not exist; pass a .jsonl file or a folder of pages")
        files = [path] if path.is_file() else sorted(
            f for f in path.rglob("*") if f.suffix.lower() in SNAPSHOT_SUFFIXES and not f.name.startswith(".")
            and _a_page(f))
        if not files:
            raise UserError(f"web snapshot {path} holds no .jsonl, .md, .txt or .html files; pass a folder of pages "
                            "or a .jsonl file")
        digest = hashlib.sha256()
        for file in files:
            digest.update(file.name.encode() + read_bytes(file))
        self.fingerprint = digest.hexdigest()[:16]  # the pages' content, which keys the runs made over them
        folder = cache_root() / "web-snapshots" / self.fingerprint
        index_config = config.model_copy(update={"index": IndexConfig(path=folder)})
        self.index = Index(index_config)
        if self.index.exists and self.index.chunk_count:
            self.index.require()  # built before: only read from now on
        else:
            self.index.ingest_documents(snapshot_documents(files))
        self.retriever = Retriever(self.index, config.retrieval.top_k, config.retrieval.rrf_k)

    def search(self, query: str, k: int) -> list[Passage]:
        return self.retriever.search(query, "hybrid")[:k]


def web_search(config: Config, choice: str | None = None) -> WebSearch | None:
    """The configured provider, or the one `--web tavily|off|PATH` names; None when off."""
    if choice is None:
        choice = config.web.provider
        if choice == "snapshot":
            if config.web.snapshot_path is None:
                raise UserError("web.provider is snapshot but web.snapshot_path is not set; set it or use --web PATH")
            choice = str(config.web.snapshot_path)
    if not choice.strip():  # an empty path would make the working folder the snapshot
        raise UserError("--web is empty; pass tavily, off, or the PATH of a snapshot (.jsonl file or folder of pages)")
    if choice == "off":
        return None
    if choice == "tavily":
        if config.web.tavily_api_key is None:
            raise UserError("web search via Tavily needs TAVILY_API_KEY; set it, or use --web PATH (offline) or --web off")
        return TavilySearch(config.web.tavily_api_key.get_secret_value(), config.web.tavily_base_url)
    return SnapshotSearch(Path(choice), config)
