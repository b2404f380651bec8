"""The LM failures a user can act on, as one-line errors."""

from collections.abc import Iterator
from contextlib import contextmanager

from dspy_rag.config import Config
from dspy_rag.errors import UserError


@contextmanager
def lm_failures(settings: Config) -> Iterator[None]:
    """The LM failures a user can act on (a full context window, unparseable output, a server down or refusing),
    as one-line errors."""
    from dspy.utils.exceptions import AdapterParseError, ContextWindowExceededError, LMError, LMTransportError

    from dspy_rag.pipelines.lm_calls import Unparseable

    model = settings.lm.model
    try:
        yield
    except ContextWindowExceededError as exc:
        raise UserError(f"the prompt does not fit {model}'s context window ({settings.lm.context_window} tokens); "
                        "lower retrieval.top_n or ingest.chunk_chars, or raise lm.context_window") from exc
    except (AdapterParseError, Unparseable) as exc:
        raise UserError(f"{model} returned output that could not be parsed; retry, or use a larger --model") from exc
    except LMTransportError as exc:  # no reply at all: DSPy's own advice after the ';' is for library users
        reason = (str(exc).strip().split(";")[0].splitlines() or [type(exc).__name__])[0]
        raise UserError(f"{reason}; check that {model}'s server (lm.api_base) runs and answers within lm.timeout "
                        f"({settings.lm.timeout:.0f} s)") from exc
    except LMError as exc:
        first_line = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        raise UserError(f"{first_line}; check the model name, its server (lm.api_base) and its API key") from exc
