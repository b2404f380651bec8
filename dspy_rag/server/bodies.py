"""The request bodies the server takes: typed, closed to unknown fields and checked before anything runs. A client
names an artifact and a web provider, never a path on the server. The research options' types are named, so the
MCP tools (dspy_rag.server.mcp_tools) offer the same ones."""

from collections.abc import Sequence
from typing import Annotated, Literal

from pydantic import BaseModel, ConfigDict, Field
from pydantic_core import ErrorDetails

from dspy_rag.config import BudgetConfig, Config
from dspy_rag.errors import UserError, one_line

# An artifact by name (or auto, none): a folder path from a client would read the server's files.
ARTIFACT_NAME = r"^[A-Za-z0-9][A-Za-z0-9._-]{0,99}$"
Pipeline = Annotated[Literal["deep", "baseline"], Field(
    description="which program answers: deep (plans and researches step by step) or baseline (one retrieval)")]
PolicyName = Annotated[Literal["auto", "llm", "plan", "learned"], Field(
    description="deep: who decides to go on or stop (plan: follow the plan; learned: the artifact's classifiers; "
                "auto: learned where the artifact has them, else llm)")]
ArtifactName = Annotated[str, Field(
    pattern=ARTIFACT_NAME, description="deep: a compiled artifact by name, auto (the model's default) or none")]
WebProvider = Annotated[Literal["off", "tavily"], Field(
    description="also search the web with tavily, or not (default: the configured provider)")]


def problem(errors: Sequence[ErrorDetails], whole: str) -> str:
    """The first of a validation's errors as one line, "field: what is wrong" (`whole` when it is no field's)."""
    first = errors[0]
    where = ".".join(str(part) for part in first["loc"] if part != "body") or whole
    return one_line(f"{where}: {first['msg']}")


class Closed(BaseModel):
    model_config = ConfigDict(extra="forbid", strict=True)


class Budgets(Closed):
    """Lower budgets for one run; the server's own (`budgets:`) are the most a client may ask for."""

    max_steps: int | None = Field(None, ge=1)
    max_lm_calls: int | None = Field(None, ge=1)
    wall_clock_seconds: float | None = Field(None, gt=0)

    def within(self, limits: BudgetConfig) -> BudgetConfig:
        """The server's budgets lowered to these; one above the server's is refused."""
        asked = self.model_dump(exclude_none=True)
        for name, value in asked.items():
            if value > getattr(limits, name):
                raise UserError(f"budgets.{name} {value} is over this server's {getattr(limits, name)}; "
                                "ask for that or less")
        return limits.model_copy(update=asked)


class ResearchBody(Closed):
    """POST /v1/research: `ask`'s question and options."""

    question: str = Field(min_length=1)
    pipeline: Pipeline = "deep"
    policy: PolicyName = "auto"
    artifact: ArtifactName | None = None
    web: WebProvider | None = None  # None: the configured provider
    budgets: Budgets | None = None
    stream: bool = True

    def settings(self, config: Config) -> Config:
        """The server's configuration with this request's budgets."""
        if self.budgets is None:
            return config
        return config.model_copy(update={"budgets": self.budgets.within(config.budgets)})


class Part(BaseModel):
    """A piece of an OpenAI message's content; only text is read."""

    model_config = ConfigDict(extra="ignore")
    type: str
    text: str | None = None


class Message(BaseModel):
    model_config = ConfigDict(extra="ignore")
    role: str
    content: str | list[Part] | None = None

    @property
    def text(self) -> str:
        if isinstance(self.content, list):
            return " ".join(part.text or "" for part in self.content if part.type == "text")
        return self.content or ""


class ChatBody(BaseModel):
    """POST /v1/chat/completions as OpenAI clients send it; options the assistant has no use for are ignored."""

    model_config = ConfigDict(extra="ignore")
    model: str
    messages: list[Message] = Field(min_length=1, max_length=200)
    stream: bool = False

    def question(self) -> str:
        """The last user message: the question researched."""
        asked = [m.text for m in self.messages if m.role == "user"]
        if not asked or not asked[-1].strip():
            raise UserError("the last user message is empty; send the question as a user message")
        return asked[-1]


class IngestBody(Closed):
    """POST /v1/ingest (when serve.ingest is on): files, folders or URLs as the server sees them."""

    inputs: list[str] = Field(min_length=1, max_length=100)
