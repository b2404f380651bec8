"""Readers: the real NVIDIA 10-K, Markdown, text, ordinary HTML, a hand-built PDF, page furniture, and bad input."""

import re
from collections.abc import Callable
from pathlib import Path

import pytest

from dspy_rag.chunking import Chunk, chunk_document
from dspy_rag.documents import Document, Section, drop_page_furniture, kind_of, parse, read_bytes, read_html
from dspy_rag.errors import UserError

REQUIRED_ITEMS = ("Item 1.", "Item 1A.", "Item 2.", "Item 7.", "Item 7A.", "Item 8.")


@pytest.fixture(scope="module")
def tenk(tenk_filing: Path) -> Document:
    return read_html(tenk_filing.read_bytes(), str(tenk_filing))


def assert_tiles(document: Document) -> None:
    """Sections cover the text exactly once, in order, without gaps or empty sections."""
    sections = document.sections
    assert sections, "a document always has at least one section"
    assert sections[0].start == 0
    assert sections[-1].end == len(document.text)
    for before, after in zip(sections, sections[1:], strict=False):
        assert before.end == after.start
    assert all(section.end > section.start for section in sections)


def section_at(document: Document, offset: int) -> Section:
    return next(s for s in document.sections if s.start <= offset < s.end)


def section_text(document: Document, prefix: str) -> str:
    (section,) = [s for s in document.sections if s.title.startswith(prefix + " ")]
    return document.text[section.start : section.end]


def build_pdf(pages: list[str]) -> bytes:
    """A minimal valid PDF: each page's text in Helvetica, one line per '\n', with an exact xref table."""
    kids = " ".join(f"{4 + 2 * i} 0 R" for i in range(len(pages)))
    objects = [
        b"<< /Type /Catalog /Pages 2 0 R >>",
        f"<< /Type /Pages /Kids [{kids}] /Count {len(pages)} >>".encode(),
        b"<< /Type /Font /Subtype /Type1 /BaseFont /Helvetica >>",
    ]
    for i, page in enumerate(pages):
        shown = " T* ".join(f"({line}) Tj" for line in page.split("\n"))
        stream = f"BT /F1 12 Tf 14 TL 72 720 Td {shown} ET".encode()
        objects.append(
            f"<< /Type /Page /Parent 2 0 R /MediaBox [0 0 612 792] "
            f"/Resources << /Font << /F1 3 0 R >> >> /Contents {5 + 2 * i} 0 R >>".encode()
        )
        objects.append(b"<< /Length %d >>\nstream\n%s\nendstream" % (len(stream), stream))
    out = bytearray(b"%PDF-1.4\n")
    offsets = []
    for number, body in enumerate(objects, start=1):
        offsets.append(len(out))
        out += b"%d 0 obj\n%s\nendobj\n" % (number, body)
    xref = len(out)
    out += b"xref\n0 %d\n0000000000 65535 f \n" % (len(objects) + 1)
    out += b"".join(b"%010d 00000 n \n" % offset for offset in offsets)
    out += b"trailer\n<< /Size %d /Root 1 0 R >>\nstartxref\n%d\n%%%%EOF\n" % (len(objects) + 1, xref)
    return bytes(out)


# --- the real 10-K ---------------------------------------------------------------------------------------


@pytest.mark.parametrize("prefix", REQUIRED_ITEMS)
def test_10k_has_each_item_heading_once(tenk: Document, prefix: str) -> None:
    assert sum(s.title.startswith(prefix + " ") for s in tenk.sections) == 1


def test_10k_item_headings_in_document_order(tenk: Document) -> None:
    starts = [next(s.start for s in tenk.sections if s.title.startswith(p + " ")) for p in REQUIRED_ITEMS]
    assert starts == sorted(starts)


@pytest.mark.parametrize(
    "title",
    [
        "Item 1A. Risk Factors",
        "Item 7. Management's Discussion and Analysis of Financial Condition and Results of Operations",
    ],
)
def test_10k_item_titles_are_readable(tenk: Document, title: str) -> None:
    assert title in [s.title for s in tenk.sections]


def test_10k_table_of_contents_is_not_a_section_start(tenk: Document) -> None:
    # Taking the contents page as the heading would leave Item 1A a one-line section.
    assert len(section_text(tenk, "Item 1A.")) > 50_000
    assert "Risk Factors Summary" in section_text(tenk, "Item 1A.")


def test_10k_hidden_xbrl_header_is_dropped(tenk: Document) -> None:
    assert tenk.text.startswith("UNITED STATES\nSECURITIES AND EXCHANGE COMMISSION")
    for xbrl in ("dei:", "us-gaap:", "xbrli:", "iso4217", "fasb.org", "0001045810"):
        assert xbrl not in tenk.text


def test_10k_sections_tile_the_text(tenk: Document) -> None:
    assert_tiles(tenk)


def test_10k_data_center_revenue_is_in_item_7(tenk: Document) -> None:
    offset = tenk.text.find("Data Center revenue for fiscal year 2023 was $15.01 billion")
    assert offset != -1
    assert section_at(tenk, offset).title.startswith("Item 7. ")


def test_10k_financial_table_cells_are_compacted(tenk: Document) -> None:
    item7 = section_text(tenk, "Item 7.")
    assert "Compute & Networking | $15,068 | $11,046 | $4,022 | 36%" in item7.splitlines()
    assert "Graphics | 11,906 | 15,868 | (3,962) | (25)%" in item7.splitlines()
    assert "$ |" not in tenk.text
    assert "| %" not in tenk.text and "| )" not in tenk.text
    assert "| |" not in tenk.text


# --- the real 10-K's page furniture: 92 printed pages, a contents link atop each, page numbers 2-92 below

PAGE_NUMBER = re.compile(r"\d{1,3}")
# The page column of the two contents lists (the filing's and Item 15's index of financial statements): real text.
CONTENTS_PAGES = {"Front matter": [4, 15, 33, 33, 34, 34, 34, 35, 36, 46, 47, 47, 47, 48, 48, 48, 49, 49, 50, 50, 51,
                                   90, 91],
                  "Item 15.": [52, 54, 55, 56, 57, 58, 59, 87, 88]}


@pytest.fixture(scope="module")
def tenk_chunks(tenk: Document) -> list[Chunk]:
    return chunk_document(tenk)


def test_10k_chunks_have_no_page_number_lines(tenk: Document, tenk_chunks: list[Chunk]) -> None:
    for section in tenk.sections:
        lines = tenk.text[section.start : section.end].split("\n")
        contents = next((pages for prefix, pages in CONTENTS_PAGES.items() if section.title.startswith(prefix)), [])
        assert [int(line) for line in lines if PAGE_NUMBER.fullmatch(line)] == contents, section.title
    assert not [line for chunk in tenk_chunks if not chunk.section.startswith(tuple(CONTENTS_PAGES))
                for line in chunk.text.split("\n") if PAGE_NUMBER.fullmatch(line)]


def test_10k_chunks_have_no_table_of_contents_links(tenk_chunks: list[Chunk]) -> None:
    assert not [chunk.id for chunk in tenk_chunks if "table of contents" in chunk.text.lower().split("\n")]


def test_10k_running_headers_are_kept_only_where_they_are_titles(tenk: Document) -> None:
    lines = tenk.text.split("\n")
    # On 34 and 28 pages; the first occurrence is the title of the statements and of their notes.
    assert lines.count("NVIDIA CORPORATION AND SUBSIDIARIES") == 1
    assert lines.count("NOTES TO THE CONSOLIDATED FINANCIAL STATEMENTS") == 1
    assert "NVIDIA CORPORATION AND SUBSIDIARIES\nCONSOLIDATED STATEMENTS OF INCOME\n" in tenk.text
    assert "NOTES TO THE CONSOLIDATED FINANCIAL STATEMENTS\nNote 1 - Organization and Summary" in tenk.text


def test_10k_sections_unchanged_and_chunk_count_sane(tenk: Document, tenk_chunks: list[Chunk]) -> None:
    assert [s.title.split(". ")[0] for s in tenk.sections] == [
        "Front matter", "Item 1", "Item 1A", "Item 1B", "Item 2", "Item 3", "Item 4", "Item 5", "Item 6", "Item 7",
        "Item 7A", "Item 8", "Item 9", "Item 9A", "Item 9B", "Item 9C", "Item 10", "Item 11", "Item 12", "Item 13",
        "Item 14", "Item 15", "Item 16"]
    # 470 chunks of 321,180 characters with the furniture; it was 1.5% of the text.
    assert 455 <= len(tenk_chunks) < 470
    assert 315_000 < len(tenk.text) < 321_180


@pytest.mark.parametrize(
    "passage",
    [
        # Page 37 ends after the first sentence; its number and the next page's contents link came between.
        "Revenue for fiscal year 2023 revenue was $26.97 billion, flat compared with a year ago.\n"
        "Data Center revenue was up 41% from a year ago",
        # A sentence the break after page 11 cut in two.
        "the responsible use of AI, climate change, cryptocurrency, and consumer laws, could increase our costs",
    ],
)
def test_10k_text_runs_on_across_a_page_break(tenk_chunks: list[Chunk], passage: str) -> None:
    assert any(passage in chunk.text for chunk in tenk_chunks)


# --- page furniture in general -------------------------------------------------------------------------


def test_page_furniture_is_peeled_from_page_edges_only() -> None:
    pages = [["ACME CORP", "Contents", "Risk Factors", "4", "i"],
             ["Table of Contents", "ACME CORP", "Revenue grew.", "Year Ended", "Sales | 10 | 20", "ii"],
             ["ACME CORP", "Year Ended", "Sales | 30 | 40", "Margins held.", "Page 3 of 4"],
             ["Return to Table of Contents", "ACME CORP", "Year Ended", "2021", "Costs fell.", "- 4 -"]]
    assert drop_page_furniture(pages) == [
        # The running header stays where it first appears; one page number per edge, so a contents entry stays.
        ["ACME CORP", "Contents", "Risk Factors", "4"],
        ["Revenue grew.", "Year Ended", "Sales | 10 | 20"],
        ["Year Ended", "Sales | 30 | 40", "Margins held."],
        ["Year Ended", "2021", "Costs fell."],
    ]


def test_single_page_keeps_lone_numbers() -> None:
    assert drop_page_furniture([["Table of Contents", "Score", "42"]]) == [["Score", "42"]]


def test_pdf_running_header_and_page_numbers_are_dropped() -> None:
    pages = [f"ACME Corp Annual Report\n{text}\nPage {n} of 3"
             for n, text in enumerate(["Revenue grew strongly", "Margins held steady", "Costs fell"], start=1)]
    document = parse(build_pdf(pages), "x.pdf", "pdf")
    assert titled_spans(document) == [("Page 1", "ACME Corp Annual Report\nRevenue grew strongly\n"),
                                      ("Page 2", "Margins held steady\n"), ("Page 3", "Costs fell")]


def test_text_form_feeds_mark_pages() -> None:
    text = "Field notes\nIntro.\n1\n\fField notes\nMiddle.\n2\n\fField notes\nEnd.\n3\n"
    assert parse(text.encode(), "notes.txt", "text").text == "Field notes\nIntro.\nMiddle.\nEnd."


# --- a small SEC-style filing, for what this 10-K does not exercise ------------------------------------

SMALL_ITEMS = [("1", "Business", "We make chips."), ("1A", "Risk Factors", "Supply may fail."),
               ("7", "Management's Discussion and Analysis", "Revenue grew."), ("8", "Financial Statements", "Audited.")]


def small_filing(after_body: str = "") -> bytes:
    """A one-row-per-item table of contents with page numbers, the body, then `after_body`."""
    toc = "".join(f"<tr><td>Item {n}.</td><td>{title}</td><td>{4 * i + 3}</td></tr>"
                  for i, (n, title, _) in enumerate(SMALL_ITEMS))
    body = "".join(f"<p>ITEM {n}. {title.upper()}</p><p>{text}</p>" for n, title, text in SMALL_ITEMS)
    return (f'<html><body><div style="display:none"><ix:header><ix:hidden>0001045810 FY false</ix:hidden>'
            f"</ix:header></div><p>Table of Contents</p><table>{toc}</table>{body}{after_body}</body></html>").encode()


def assert_small_items(document: Document) -> None:
    assert [s.title for s in document.sections] == ["Front matter"] + [f"Item {n}. {t}" for n, t, _ in SMALL_ITEMS]
    for section, (_, _, text) in zip(document.sections[1:], SMALL_ITEMS, strict=True):
        assert document.text[section.start : section.end].split("\n")[1] == text
    assert_tiles(document)


def test_sec_headings_skip_a_table_of_contents_with_titles() -> None:
    document = read_html(small_filing(), "small.htm")
    assert "Item 7. | Management's Discussion and Analysis | 11" in document.text.splitlines()
    assert_small_items(document)


def test_sec_headings_ignore_a_cross_reference_after_the_body() -> None:
    index = "<p>Cross-reference index</p><table><tr><td>Item 7.</td><td>Management's Discussion and Analysis</td>" \
            "<td>11</td></tr></table>"
    assert_small_items(read_html(small_filing(index), "small.htm"))


def test_inline_xbrl_header_dropped_even_when_not_hidden_by_style() -> None:
    markup = b"<html><body><ix:header><ix:hidden>0001045810 FY false</ix:hidden></ix:header><p>Visible</p></body></html>"
    assert parse(markup, "f.htm", "html").text == "Visible"


# --- Markdown, text, ordinary HTML ---------------------------------------------------------------------


def titled_spans(document: Document) -> list[tuple[str, str]]:
    return [(s.title, document.text[s.start : s.end]) for s in document.sections]


def test_markdown_sections_follow_headers() -> None:
    text = "Preface line.\n# Alpha\nalpha body\n#nothashtag\n## Beta ##\nbeta body\n"
    document = parse(text.encode(), "notes/guide.md", "markdown")
    assert document.kind == "markdown"
    assert titled_spans(document) == [
        ("guide", "Preface line.\n"),
        ("Alpha", "# Alpha\nalpha body\n#nothashtag\n"),
        ("Beta", "## Beta ##\nbeta body\n"),
    ]
    assert_tiles(document)


def test_plain_text_is_one_section() -> None:
    text = "First line.\n\n# not a header in plain text\nLast line."
    document = parse(text.encode(), "folder/notes.txt", "text")
    assert document.text == text
    assert document.sections == (Section("notes", 0, len(text)),)


def test_html_headings_give_sections_and_hidden_text_is_dropped() -> None:
    markup = b"""<html><head><title>Page title</title><style>p {color: red}</style></head><body>
    <p>Intro text.</p>
    <h1>Getting started</h1><p>Install it.</p>
    <div style="DISPLAY : none"><p>tracking pixel text</p></div>
    <h2>Configuration</h2><p>Set the key.</p><script>var hidden = 1;</script>
    </body></html>"""
    document = parse(markup, "guide.html", "html")
    assert titled_spans(document) == [
        ("Front matter", "Intro text.\n"),
        ("Getting started", "Getting started\nInstall it.\n"),
        ("Configuration", "Configuration\nSet the key."),
    ]
    for hidden in ("tracking pixel", "Page title", "color: red", "var hidden"):
        assert hidden not in document.text


def test_malformed_html_still_parses() -> None:
    markup = b"<div><p>First para<div>nested <b>bold</span></div></div></div></div><p>Second &amp; last<td>cell"
    document = parse(markup, "broken.html", "html")
    assert document.text.splitlines() == ["First para", "nested bold", "Second & last", "cell"]
    assert_tiles(document)


# --- PDF ---------------------------------------------------------------------------------------------


def test_pdf_text_and_page_sections() -> None:
    document = parse(build_pdf(["Revenue grew strongly", "Margins held steady"]), "x.pdf", "pdf")
    assert document.kind == "pdf"
    assert titled_spans(document) == [("Page 1", "Revenue grew strongly\n"), ("Page 2", "Margins held steady")]


# --- bad input -----------------------------------------------------------------------------------------


def raises_one_line(call: Callable[..., object], *args: object) -> str:
    with pytest.raises(UserError) as caught:
        call(*args)
    message = str(caught.value)
    assert message and "\n" not in message
    return message


@pytest.mark.parametrize("kind", ["html", "markdown", "text"])
def test_parse_rejects_binary(kind: str) -> None:
    message = raises_one_line(parse, b"PK\x03\x04\x00\x00binary zip", "archive.txt", kind)
    assert "binary" in message


@pytest.mark.parametrize("data", [b"just some text", b"<html><body>not a pdf</body></html>", b"%PDF-1.4 truncated"])
def test_parse_rejects_non_pdf_with_pdf_name(data: bytes) -> None:
    assert "x.pdf" in raises_one_line(parse, data, "x.pdf", "pdf")


@pytest.mark.parametrize(
    ("data", "name", "kind"),
    [
        (b"", "empty.txt", "text"),
        (b"  \n\t\n", "blank.md", "markdown"),
        (b"", "empty.html", "html"),
        (b"<html><body><script>only()</script><p style='display:none'>x</p></body></html>", "s.html", "html"),
    ],
)
def test_parse_rejects_documents_without_text(data: bytes, name: str, kind: str) -> None:
    raises_one_line(parse, data, name, kind)


@pytest.mark.parametrize(("name", "kind"), [("a.HTM", "html"), ("b.xhtml", "html"), ("c.Md", "markdown"),
                                            ("d.txt", "text"), ("e.PDF", "pdf")])
def test_kind_of_known_suffixes(name: str, kind: str) -> None:
    assert kind_of(Path(name)) == kind


@pytest.mark.parametrize("name", ["report.docx", "archive.zip", "README"])
def test_kind_of_rejects_unsupported_suffix(name: str) -> None:
    assert name in raises_one_line(kind_of, Path(name))


def test_read_bytes_missing_file(tmp_path: Path) -> None:
    missing = tmp_path / "nope.htm"
    assert str(missing) in raises_one_line(read_bytes, missing)


def test_read_bytes_directory(tmp_path: Path) -> None:
    assert "directory" in raises_one_line(read_bytes, tmp_path)


def test_read_bytes_returns_content(tmp_path: Path) -> None:
    path = tmp_path / "a.txt"
    path.write_bytes(b"caf\xc3\xa9")
    assert read_bytes(path) == b"caf\xc3\xa9"


def test_comment_lines_in_fenced_code_are_not_sections() -> None:
    from dspy_rag.documents import read_markdown

    text = ("# Setup\nRun this:\n```bash\n# install the tool\npip install x\n```\n"
            "~~~~\n# still code\n```\n# code too: a shorter, other fence does not close it\n~~~~\n"
            "## Usage\nAsk it.\n````\n# an unclosed block runs to the end\n")
    assert [s.title for s in read_markdown(text, "notes.md").sections] == ["Setup", "Usage"]
