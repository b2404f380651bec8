"""Readers: turn a file or URL into plain text plus the sections it is made of.

Each reader returns a `Document` whose sections tile its text in order, so a chunk can always be traced
back to a section and to exact character offsets.
"""

import logging
import re
import stat
import time
import urllib.error
import urllib.parse
import urllib.request
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from dspy_rag.errors import UserError

MAX_FILE_BYTES = 200 * 1024 * 1024
DOWNLOAD_SECONDS = 300.0  # a whole download; a 10-K's 5 MB takes seconds
DOWNLOAD_PIECE = 256 * 1024


@dataclass(frozen=True)
class Section:
    title: str
    start: int
    end: int


@dataclass(frozen=True)
class Document:
    source: str
    kind: str
    text: str
    sections: tuple[Section, ...]


def _tile(text: str, headings: list[tuple[int, str]], preamble: str) -> tuple[Section, ...]:
    """Sections from heading offsets; text before the first heading becomes `preamble`."""
    starts = sorted({offset: title for offset, title in headings}.items())
    if not starts or starts[0][0] > 0:
        starts.insert(0, (0, preamble))
    bounds = [offset for offset, _ in starts[1:]] + [len(text)]
    return tuple(Section(title, start, end) for (start, title), end in zip(starts, bounds, strict=True) if end > start)


# --- page furniture: what a printed page repeats around its text ----------------------------------------

_ROMAN = r"(?=[ivxlcdm])m{0,3}(?:cm|cd|d?c{0,3})(?:xc|xl|l?x{0,3})(?:ix|iv|v?i{0,3})"
# At most three digits: a lone four-digit line is far more often a year heading a table column.
_PAGE_NUMBER = re.compile(rf"[-\u2013\u2014\s]*(?:page\s+)?(?:\d{{1,3}}|{_ROMAN})(?:\s+of\s+\d{{1,3}})?[-\u2013\u2014\s]*",
                          re.I)
_CONTENTS_LINK = re.compile(r"(?:(?:back|return)\s+to\s+(?:the\s+)?)?table\s+of\s+contents", re.I)
RUNNING_MAX_CHARS = 80
RUNNING_MIN_PAGES = 3


def drop_page_furniture(pages: list[list[str]]) -> list[list[str]]:
    """The pages without their furniture: page numbers, "Table of Contents" lines, running headers and footers.

    "Table of Contents" lines (the link SEC filings put atop every page) go wherever they are. The rest is only
    ever at a page's edges, so each page is peeled from the top and from the bottom, one layer at a time, while
    the edge line is blank, a page number (once per edge: the next lone number is a contents-page entry), or a
    running line: under RUNNING_MAX_CHARS characters and at that edge layer on RUNNING_MIN_PAGES pages or more.
    A running line keeps its first occurrence, where it usually is a title ("NOTES TO THE CONSOLIDATED
    FINANCIAL STATEMENTS" opens the notes before it heads each of their pages).
    """
    pages = [[line for line in page if not _CONTENTS_LINK.fullmatch(line.strip())] for page in pages]
    if len(pages) < 2:
        return pages  # one page has no page numbers or running lines to tell apart from its text
    spans = [[0, len(page)] for page in pages]  # what is kept of each page: page[lo:hi]
    seen: set[str] = set()
    for side in (0, 1):  # the top edge, then the bottom one
        step = -1 if side else 1
        numbered = [False] * len(pages)
        peeling = set(range(len(pages)))
        while peeling:
            edges: dict[int, str] = {}  # the outermost line of text of each page still being peeled
            for n in sorted(peeling):
                span = spans[n]
                while span[0] < span[1]:
                    line = pages[n][span[1] - 1 if side else span[0]].strip()
                    if not line:
                        span[side] += step
                    elif not numbered[n] and _PAGE_NUMBER.fullmatch(line):
                        numbered[n] = True
                        span[side] += step
                    else:
                        edges[n] = line
                        break
            counts = Counter(edges.values())
            peeling = set()
            for n, line in edges.items():  # in page order, so the first occurrence is the one kept
                if line in seen and len(line) < RUNNING_MAX_CHARS and counts[line] >= RUNNING_MIN_PAGES:
                    spans[n][side] += step
                    peeling.add(n)
                seen.add(line)
    return [page[lo:hi] for page, (lo, hi) in zip(pages, spans, strict=True)]


# --- HTML (including SEC inline-XBRL filings) ---------------------------------------------------------

_BLOCK_TAGS = frozenset(
    "address article aside blockquote br dd div dl dt figcaption figure footer form h1 h2 h3 h4 h5 h6 header hr "
    "li main nav ol p pre section table tbody thead tfoot tr ul title".split()
)
_CELL_TAGS = frozenset({"td", "th"})
_SKIP_TAGS = frozenset({"script", "style", "noscript", "template", "head", "ix:header"})
_HIDDEN_STYLE = re.compile(r"display\s*:\s*none", re.I)
# SEC filings print from HTML: `<hr style="page-break-after:always">` ends each page (CSS3 says `break-after:page`).
_PAGE_BREAK_STYLE = re.compile(r"(?:page-)?break-(before|after)\s*:\s*(?:always|page)", re.I)
_SEC_ITEM = re.compile(r"^item\s+(\d{1,2}[a-c]?)\s*[.:\-\u2013\u2014]\s*(\S.{0,150})$", re.I)


def _html_pages(markup: bytes) -> list[list[str]]:
    """Visible text of an HTML page, one line per block element, table cells joined by ' | ', split into the
    printed pages its page-break styles mark (a single page when there are none)."""
    from lxml import etree, html

    try:
        root = html.fromstring(markup)
    except (etree.ParserError, ValueError) as exc:
        raise UserError(f"cannot parse HTML: {exc}; check the file, or save the page as text") from exc
    pieces: list[str] = []

    def walk(node: etree._Element) -> None:
        tag = node.tag.lower() if isinstance(node.tag, str) else ""
        style = node.get("style", "")
        hidden = tag in _SKIP_TAGS or not tag or _HIDDEN_STYLE.search(style)
        page_break = None if hidden else _PAGE_BREAK_STYLE.search(style)
        if not hidden:
            if page_break and page_break.group(1).lower() == "before":
                pieces.append("\f")
            if tag in _BLOCK_TAGS:
                pieces.append("\n")
            elif tag in _CELL_TAGS:
                pieces.append(" | ")
            if node.text:
                pieces.append(node.text)
            for child in node:
                walk(child)
            if tag in _BLOCK_TAGS:
                pieces.append("\n")
            if page_break and page_break.group(1).lower() == "after":
                pieces.append("\f")
        if node.tail:
            pieces.append(node.tail)

    walk(root)
    pages = []
    for page in "".join(pieces).split("\f"):
        lines = (_compact_cells(" ".join(raw.replace("\xa0", " ").split())) for raw in page.split("\n"))
        pages.append([line for line in lines if line])
    return pages


def _compact_cells(line: str) -> str:
    """Financial tables split '$', '15,068' and '%' into cells; rejoin them and drop empty cells."""
    line = re.sub(r"\|(?:\s*\|)+", "|", line)
    line = re.sub(r"\$\s*\|\s*", "$", line)
    line = re.sub(r"\s*\|\s*([%)])", r"\1", line)
    return line.strip(" |")


def _sec_headings(lines: list[str]) -> list[tuple[int, str]]:
    """Indexes of `ITEM 1A. RISK FACTORS`-style heading lines, skipping the table of contents.

    The table of contents repeats every heading with a page number; the body heading is the last
    occurrence of each item that still keeps items in order.
    """
    found: list[tuple[int, str, str]] = []
    for i, line in enumerate(lines):
        match = _SEC_ITEM.match(line)
        # A cross-reference reads like a sentence; a heading is upper case or has no closing punctuation.
        if match and (line.isupper() or not match.group(2).rstrip().endswith((".", ",", ";"))):
            found.append((i, match.group(1).upper(), match.group(2)))
    # Walk items from the last to the first: each takes its last occurrence before the next item's heading,
    # so a table of contents before the body and cross-reference rows after it both lose.
    by_item: dict[str, list[tuple[int, str]]] = {}
    for i, item, title in found:
        by_item.setdefault(item, []).append((i, title))
    headings: list[tuple[int, str]] = []
    limit = len(lines)
    for item in sorted(by_item, key=_item_order, reverse=True):
        earlier = [(i, title) for i, title in by_item[item] if i < limit]
        if earlier:
            limit, title = earlier[-1]
            title = re.sub(r"\s*\|\s*\d+$", "", title).strip(" |")
            headings.append((limit, f"Item {item}. {_title_case(title)}"))
    return headings[::-1]


def _item_order(item: str) -> tuple[int, str]:
    """'1A' -> (1, 'A'): the order in which items appear in a filing."""
    digits = item.rstrip("ABC")
    return int(digits), item[len(digits) :]


def _title_case(title: str) -> str:
    small = {"and", "or", "of", "the", "in", "on", "to", "for", "a", "an", "about", "with"}
    words = title.replace("\u2019", "'").split()
    if not title.isupper():
        return " ".join(words)
    return " ".join(
        w if any(c.isdigit() for c in w) else w.lower() if w.lower() in small and n else _capitalize(w)
        for n, w in enumerate(words)
    )


def _capitalize(word: str) -> str:
    """'[RESERVED]' -> '[Reserved]': upper-case the first letter, not the first character."""
    return re.sub(r"[a-z]", lambda m: m.group().upper(), word.lower(), count=1)


def _html_headings(markup: bytes, lines: list[str]) -> list[tuple[int, str]]:
    """Line indexes of h1–h4 headings for ordinary web pages."""
    from lxml import html

    titles = {" ".join(h.text_content().split()) for h in html.fromstring(markup).iter("h1", "h2", "h3", "h4")}
    return [(i, line) for i, line in enumerate(lines) if line in titles]


def _join_pages(pages: list[list[str]]) -> list[str]:
    """The lines of all pages in order; a paragraph a page break cut in two is one line again."""
    lines: list[str] = []
    for page in pages:
        # A page that opens in lower case continues the sentence the previous page left unfinished.
        if lines and page and page[0][:1].islower():
            lines[-1] += " " + page[0]
            page = page[1:]
        lines.extend(page)
    return lines


def read_html(markup: bytes, source: str) -> Document:
    lines = _join_pages(drop_page_furniture(_html_pages(markup)))
    if not lines:
        raise UserError(f"{source} has no visible text to ingest; check that it is the page you meant")
    headings = _sec_headings(lines)
    if len(headings) < 3:
        headings = _html_headings(markup, lines)
    offsets, position = [], 0
    for line in lines:
        offsets.append(position)
        position += len(line) + 1
    text = "\n".join(lines)
    return Document(source, "html", text, _tile(text, [(offsets[i], t) for i, t in headings], "Front matter"))


# --- Markdown, plain text, PDF ------------------------------------------------------------------------

_MD_HEADER = re.compile(r"^ {0,3}(#{1,6})\s+(.+?)\s*#*\s*$", re.M)
_MD_FENCE = re.compile(r"^ {0,3}(`{3,}|~{3,})", re.M)  # a code block's opening or closing fence


def _fenced(text: str) -> list[tuple[int, int]]:
    """The spans of fenced code blocks; one left open runs to the end of the text."""
    spans, opened = [], None
    for fence in _MD_FENCE.finditer(text):
        mark = fence.group(1)
        if opened is None:
            opened = fence
        elif mark[0] == opened.group(1)[0] and len(mark) >= len(opened.group(1)):
            spans.append((opened.start(), fence.end()))
            opened = None
    return spans + ([(opened.start(), len(text))] if opened else [])


def read_markdown(text: str, source: str) -> Document:
    """Sections at the ATX headings; a "# comment" line inside a fenced code block is code, not a heading."""
    code = _fenced(text)
    headings = [(m.start(), m.group(2)) for m in _MD_HEADER.finditer(text)
                if not any(start <= m.start() < end for start, end in code)]
    return Document(source, "markdown", text, _tile(text, headings, Path(source).stem or "Document"))


def read_text(text: str, source: str) -> Document:
    if "\f" in text:  # form feeds are the page breaks of printed text
        text = "\n".join("\n".join(page) for page in drop_page_furniture([p.split("\n") for p in text.split("\f")]))
    return Document(source, "text", text, _tile(text, [], Path(source).stem or "Document"))


def read_pdf(data: bytes, source: str) -> Document:
    import io

    from pypdf import PdfReader

    logging.getLogger("pypdf").setLevel(logging.ERROR)  # its repair notes would bury our one-line report
    try:
        extracted = [(page.extract_text() or "").split("\n") for page in PdfReader(io.BytesIO(data)).pages]
    except Exception as exc:  # pypdf raises many types on damaged files (loops, bad streams, missing keys)
        reason = (str(exc).strip().splitlines() or [type(exc).__name__])[0]
        raise UserError(f"{source} is not a readable PDF ({reason}); check the file or convert it to text") from exc
    pages = ["\n".join(lines) for lines in drop_page_furniture(extracted)]
    headings, position = [], 0
    for number, page in enumerate(pages, start=1):
        headings.append((position, f"Page {number}"))
        position += len(page) + 1
    return Document(source, "pdf", "\n".join(pages), _tile("\n".join(pages), headings, "Page 1"))


# --- entry points ------------------------------------------------------------------------------------

_SUFFIX_KIND = {".htm": "html", ".html": "html", ".xhtml": "html", ".md": "markdown", ".markdown": "markdown",
                ".txt": "text", ".text": "text", ".pdf": "pdf"}
SUPPORTED_SUFFIXES = frozenset(_SUFFIX_KIND)


def _decode(data: bytes, source: str) -> str:
    if b"\x00" in data[:8192]:
        raise UserError(f"{source} looks binary, not text; ingest HTML, Markdown, text or PDF files")
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError:
        return data.decode("cp1252", errors="replace")


def parse(data: bytes, source: str, kind: str) -> Document:
    """Parse raw bytes of a known kind; raises UserError when the bytes are not that kind."""
    if kind == "pdf":
        if not data.startswith(b"%PDF"):
            raise UserError(f"{source} has a .pdf name but is not a PDF; rename it after its real type")
        document = read_pdf(data, source)
    elif kind == "html":
        _decode(data, source)
        document = read_html(data, source)
    elif kind == "markdown":
        document = read_markdown(_decode(data, source), source)
    else:
        document = read_text(_decode(data, source), source)
    if not document.text.strip():
        raise UserError(f"{source} contains no text to ingest; check that it is the file you meant")
    return document


def kind_of(path: Path) -> str:
    kind = _SUFFIX_KIND.get(path.suffix.lower())
    if kind is None:
        raise UserError(f"{path}: unsupported file type '{path.suffix}'; ingest .htm/.html, .md, .txt or .pdf files")
    return kind


def read_bytes(path: Path) -> bytes:
    try:
        info = path.stat()
        if stat.S_ISDIR(info.st_mode):
            raise UserError(f"{path} is a directory; pass a file or a folder of documents")
        if not stat.S_ISREG(info.st_mode):  # a pipe would block the ingest forever, a device never end
            raise UserError(f"{path} is not a regular file (a pipe, socket or device); ingest saved documents")
        if info.st_size > MAX_FILE_BYTES:
            raise UserError(f"{path} is {info.st_size // 2**20} MB, over the {MAX_FILE_BYTES // 2**20} MB limit; "
                            "split it first")
        return path.read_bytes()
    except FileNotFoundError as exc:
        raise UserError(f"{path} does not exist; check the path") from exc
    except OSError as exc:
        raise UserError(f"cannot read {path}: {exc.strerror}; check its permissions") from exc


def download(url: str, user_agent: str, timeout: float = 30.0, deadline: float = DOWNLOAD_SECONDS,
             progress: Callable[[int, int], None] = lambda _done, _total: None) -> tuple[bytes, str]:
    """Fetch a URL (SEC EDGAR asks for a descriptive User-Agent); returns the bytes and their kind. `timeout`
    bounds each wait for bytes, `deadline` the whole download (a server trickling a byte at a time never trips
    the first); `progress` hears the bytes so far and the announced length (0 when unknown)."""
    request = urllib.request.Request(url, headers={"User-Agent": user_agent, "Accept-Encoding": "identity"})
    started = time.monotonic()
    try:
        with urllib.request.urlopen(request, timeout=timeout) as response:
            content_type = response.headers.get_content_type()
            announced = int(response.headers.get("Content-Length") or 0)
            if announced > MAX_FILE_BYTES:
                raise UserError(f"{url} is larger than {MAX_FILE_BYTES // 2**20} MB; download and split it first")
            parts: list[bytes] = []
            received = 0
            while part := response.read1(DOWNLOAD_PIECE):
                parts.append(part)
                received += len(part)
                progress(received, announced)
                if received > MAX_FILE_BYTES:
                    break
                if time.monotonic() - started > deadline:
                    raise UserError(f"{url} sent {received:,} bytes in {deadline:.0f} s and is not done; download it "
                                    "elsewhere and ingest the local file")
            data = b"".join(parts)
    except (urllib.error.URLError, TimeoutError, OSError) as exc:
        reason = getattr(exc, "reason", exc)
        raise UserError(
            f"cannot download {url} ({reason}); offline, download it elsewhere and ingest the local file, "
            "e.g. ../shared/data/nvidia-10k-fy2023/nvda-20230129.htm"
        ) from exc
    if len(data) > MAX_FILE_BYTES:
        raise UserError(f"{url} is larger than {MAX_FILE_BYTES // 2**20} MB; download and split it first")
    suffix_kind = _SUFFIX_KIND.get(Path(urllib.parse.urlparse(url).path).suffix.lower())
    kind = {"application/pdf": "pdf", "text/html": "html", "application/xhtml+xml": "html",
            "text/markdown": "markdown"}.get(content_type, suffix_kind or "text")
    return data, kind
