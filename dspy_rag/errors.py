"""The one error type a user sees: a single line that says what went wrong and what to do."""

import sys
from typing import NoReturn


class UserError(Exception):
    """A failure caused by input or environment, reported as one line and a non-zero exit."""


def exit_with_error(message: str, code: int) -> NoReturn:
    """One line on stderr and a non-zero exit: what went wrong and what to do."""
    print("error: " + " ".join(message.split()), file=sys.stderr)
    sys.exit(code)
