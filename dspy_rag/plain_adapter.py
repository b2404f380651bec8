"""A DSPy adapter for signatures with one text output, in the plainest form a small model answers best in:
the instruction as the system message, the inputs as labelled plain text, and the reply taken whole.

No field markers, no JSON and no schema: the local 0.5B and 1.5B models lose their answer in structured
formats they can meet (docs/design/deep-program.md says what was measured). Demos become user/assistant turns, so a
compiled signature keeps its instruction and demos.
"""

import json
import re
from typing import Any

import dspy
from dspy.utils.exceptions import AdapterParseError

_ANSWER_LABEL = re.compile(r"^(?:\*\*)?(?:short answer|answer)\s*:\s*(?:\*\*)?\s*", re.IGNORECASE)
_LABELS = ("answer:", "short answer:")


def answer_line(reply: str) -> str:
    """A plain reply's answer: its first non-empty line, without an "Answer:" label."""
    line = next((line.strip() for line in reply.splitlines() if line.strip()), "")
    return _ANSWER_LABEL.sub("", line).strip()


def answer_so_far(reply: str) -> str:
    """The answer line of a reply still being written, as far as it goes: empty while the reply may still turn out
    a JSON object (read whole, when done) or its first line an "Answer:" label."""
    text = reply.lstrip()
    opening = text.split("\n", 1)[0].strip().strip("*").lower()
    if text.startswith("{") or any(label.startswith(opening) for label in _LABELS):
        return ""
    return answer_line(text)


def _label(name: str) -> str:
    return name.replace("_", " ").capitalize()


def _rendered(value: Any) -> str:
    """A list as one item per paragraph (passages arrive numbered); anything else as text."""
    return "\n\n".join(str(item) for item in value) if isinstance(value, list) else str(value)


class PlainAdapter(dspy.Adapter):
    """Formats and parses a signature whose only output is one string field."""

    @staticmethod
    def output_name(signature: type[dspy.Signature]) -> str:
        names = list(signature.output_fields)
        if len(names) != 1 or signature.output_fields[names[0]].annotation is not str:
            raise ValueError(f"PlainAdapter takes one str output field, not {names}")
        return names[0]

    def format_field_description(self, signature: type[dspy.Signature]) -> str:
        return ""

    def format_field_structure(self, signature: type[dspy.Signature]) -> str:
        return ""

    def format_task_description(self, signature: type[dspy.Signature]) -> str:
        return signature.instructions

    def format_system_message(self, signature: type[dspy.Signature]) -> str:
        return self.format_task_description(signature)

    def format_user_message_content(self, signature: type[dspy.Signature], inputs: dict[str, Any], prefix: str = "",
                                    suffix: str = "", main_request: bool = False) -> str:
        parts = [prefix] if prefix else []
        for name, field in signature.input_fields.items():
            if name in inputs:
                hint = field.json_schema_extra.get("desc", "") if field.json_schema_extra else ""
                label = _label(name) + (f" ({hint})" if hint and not hint.startswith("${") else "")
                parts.append(f"{label}:\n{_rendered(inputs[name])}")
        return "\n\n".join(parts + ([suffix] if suffix else []))

    def format_assistant_message_content(self, signature: type[dspy.Signature], outputs: dict[str, Any],
                                         missing_field_message: str | None = None) -> str:
        return str(outputs.get(self.output_name(signature), missing_field_message or ""))

    def parse(self, signature: type[dspy.Signature], completion: str) -> dict[str, Any]:
        """The reply's first non-empty line, without an "Answer:" label; a JSON object naming the field (as a
        served model or a scripted LM may send) gives that field, and one cut short does not parse."""
        name = self.output_name(signature)
        text = completion.strip()
        if text.startswith("{"):
            try:
                value = json.loads(text)
            except json.JSONDecodeError as exc:  # a JSON object never closed is a reply cut short, not an answer
                raise AdapterParseError(adapter_name="PlainAdapter", signature=signature, lm_response=completion,
                                        message=f"the reply opens a JSON object that does not parse ({exc.msg})") from exc
            if isinstance(value, dict) and isinstance(value.get(name), str):
                text = value[name].strip()
        line = answer_line(text)
        if not line:
            raise AdapterParseError(adapter_name="PlainAdapter", signature=signature, lm_response=completion,
                                    message="the reply is empty")
        return {name: line}
