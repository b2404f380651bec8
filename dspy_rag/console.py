"""The consoles every command prints to. Rich markup is off, so no user string (a path, a file name, a question,
a passage) is ever read as markup: "[draft] notes.md" prints as written, and "[/i]" in a path cannot break a
command after its work is done. Styling is explicit, with `Text`."""

from rich.console import Console
from rich.text import Text

# soft_wrap: piped output keeps its long lines instead of being hard-wrapped at 80 columns.
out = Console(soft_wrap=True, markup=False, highlight=False)
err = Console(stderr=True, soft_wrap=True, markup=False, highlight=False)


def styled(*parts: str | tuple[str, str]) -> Text:
    """A line of plain text and (text, style) pieces; nothing in it is read as markup."""
    return Text.assemble(*parts)


def progress(message: str, kind: str | None = None) -> None:
    """One progress line on stderr: "› message", or "› kind message" with the kind in bold."""
    err.print(styled(("› ", "dim"), *([(kind, "bold"), " "] if kind else []), message))


def quiet(_message: str, _kind: str | None = None) -> None:
    """Progress for a caller that shows none (`--json`, eval's program runs)."""
