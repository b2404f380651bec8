"""The one error type a user sees: a single line that says what went wrong and what to do."""


class UserError(Exception):
    """A failure caused by input or environment, reported as one line and a non-zero exit."""
