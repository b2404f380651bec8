"""The OpenAI chat-completions shape of an answer: the cited answer and its sources as the assistant's message,
whole or as a stream of chunks, so any OpenAI client or chat UI can use the assistant."""

import time
from typing import Any

from dspy_rag.citations import source_name

MODEL = "dspy-rag"


def message(document: dict[str, Any]) -> str:
    """`ask --json`'s document as a chat message: the short answer, the cited answer, the sentences no passage
    supports, and the sources its citations name."""
    parts = [f"**{document['short_answer']}**"] if document["short_answer"] else []
    parts.append(document["answer"])
    parts += [f"_Unsupported:_ {flag['sentence']} ({flag['reason']})" for flag in document["flagged"]]
    if document["citations"]:
        parts.append("Sources:\n" + "\n".join(f"- [{c['label']}] {source_name(c['source'])} · {c['chunk_id']}"
                                              for c in document["citations"]))
    return "\n\n".join(parts)


class Streamed:
    """A message streamed as it is written: the short answer's words as the model writes them, bold as `message`
    opens, then the rest of the message once the research is done."""

    def __init__(self) -> None:
        self.sent = ""

    def written(self, text: str) -> str:
        """The content that sends the next words of the short answer."""
        piece = text if self.sent else "**" + text
        self.sent += piece
        return piece

    def rest(self, document: dict[str, Any]) -> str:
        """The content that completes the message: what `message` says after what was sent."""
        whole = message(document)
        if whole.startswith(self.sent):
            return whole[len(self.sent):]
        return "\n\n" + whole  # the checks changed the short answer after it was written: the message in full


def completion(run_id: str, document: dict[str, Any]) -> dict[str, Any]:
    """The whole answer as one chat completion, with the run's prompt and completion tokens as its usage."""
    return {
        "id": f"chatcmpl-{run_id}", "object": "chat.completion", "created": int(time.time()), "model": MODEL,
        "choices": [{"index": 0, "message": {"role": "assistant", "content": message(document)},
                     "finish_reason": "stop"}],
        "usage": {"prompt_tokens": document["prompt_tokens"], "completion_tokens": document["completion_tokens"],
                  "total_tokens": document["tokens"]},
    }


def chunk(run_id: str, delta: dict[str, str], finish_reason: str | None = None) -> dict[str, Any]:
    """One piece of a streamed completion."""
    return {"id": f"chatcmpl-{run_id}", "object": "chat.completion.chunk", "created": int(time.time()),
            "model": MODEL, "choices": [{"index": 0, "delta": delta, "finish_reason": finish_reason}]}
