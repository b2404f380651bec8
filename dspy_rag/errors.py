"""The one error type a user sees: a single line that says what went wrong and what to do."""

import os
import sys
from typing import NoReturn

# Environment variables named like these hold credentials (OPENAI_API_KEY, TAVILY_API_KEY, HF_TOKEN, ...).
SECRET_SUFFIXES = ("_KEY", "_TOKEN", "_SECRET", "_PASSWORD")
_secrets: set[str] = set()


class UserError(Exception):
    """A failure caused by input or environment, reported as one line and a non-zero exit."""


def register_secret(value: str) -> None:
    """A value that must never be printed, such as an API key read from the configuration file."""
    _secrets.add(value)


def redact(text: str) -> str:
    """`text` with every known secret replaced by '***': a provider's error may quote the key it was sent."""
    known = _secrets | {value for name, value in os.environ.items() if name.upper().endswith(SECRET_SUFFIXES)}
    for secret in sorted((s for s in known if len(s) >= 8), key=len, reverse=True):
        text = text.replace(secret, "***")
    return text


def one_line(text: str) -> str:
    """`text` as one line a terminal shows as written: whitespace runs become one space, and every character it
    would act on instead (an escape sequence's ESC, a control, a bidi override) is shown as its escape, so a
    name echoed back cannot recolour, retitle or reorder the terminal."""
    return "".join(ch if ch.isprintable() else ascii(ch)[1:-1] for ch in " ".join(text.split()))


def exit_with_error(message: str, code: int) -> NoReturn:
    """One line on stderr and a non-zero exit: what went wrong and what to do."""
    print("error: " + one_line(redact(message)), file=sys.stderr)
    sys.exit(code)
