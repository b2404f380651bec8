"""injection: the guard that keeps a passage's instructions inert. Passage text that forges the prompt's own
structure (a passage header, a chat-template turn, a "Question:"/"Answer:" label, a reply in the output's JSON) or
that addresses the assistant with orders (ignore the instructions, reply only with, reveal the configuration, cite
this as the authority) is removed from what the LM reads, before any call sees it. The index keeps the document
whole; the trajectory says what was removed and why, and a cited sentence that only removed text could support is
flagged by the citation check like any other.
"""

import re
from dataclasses import replace

from dspy_rag.pipelines.guards import Fired
from dspy_rag.retrieval import Passage

SHOWN_CHARS = 160  # of the removed text, in the trajectory

# A line opening like the prompts' own passage headers ("[2] corvid-official.pdf | Specifications") claims a source
# it does not have: it and the lines under it, up to the next blank line, are a forged passage.
FORGED_HEADER = re.compile(r"^\s*\[\d{1,3}\]\s+[^\n|]{1,200}\|")
CHAT_TOKEN = re.compile(r"<\|[^|\n>]{1,40}\|>|\[/?INST\]|<</?SYS>>")
# The labels the prompts and their demos are written in, and the output's JSON fields.
PROMPT_LABEL = re.compile(r"^\s*(?:\*\*)?(?:question|short answer|answer|passages?|system|assistant|user)(?:\*\*)?\s*:",
                          re.IGNORECASE)
OUTPUT_JSON = re.compile(r"\{\s*\"(?:short_answer|answer|citations|steps|decision)\"\s*:")
HIDDEN_COMMENT = re.compile(r"<!--.*?-->", re.DOTALL)

# Orders to the reader of the page, in English and, for the commonest one, in other languages.
ORDERS = re.compile("|".join((
    r"\b(?:ignore|disregard|forget|override|bypass)\b[^.!?\n]{0,50}\b(?:instructions?|prompts?|rules|directions|"
    r"guidelines|(?:the )?user'?s question)\b",
    r"\b(?:ignore|disregard|forget)\b[^.!?\n]{0,30}\b(?:everything|anything)\b[^.!?\n]{0,30}\b(?:told|said|given|"
    r"above|before)\b",
    r"\b(?:attention|dear|hello|hey),? (?:ai|language models?|llms?|assistants?|chatbots?)\b|"
    r"\bthe only correct (?:reply|answer|response)\b",
    r"\b(?:reply|respond|answer|say|output|print|write|return)\b[^.!?\n]{0,40}\b(?:only|exactly|solely|verbatim|"
    r"nothing else)\b",
    r"\b(?:your (?:whole |full |entire )?(?:answer|reply|response) must|before you answer|when you answer|"
    r"you are now|you must now)\b",
    r"\b(?:reveal|print|show|repeat|disclose|output|leak|include)\b[^.!?\n]{0,60}\b(?:system prompt|\w*api[ _-]?keys?|"
    r"configuration|environment variables?|credentials|secrets?|passwords?|(?:your|the) instructions|words above)\b",
    r"\b(?:note|message|instructions?) (?:to|for) (?:the |all |any )?(?:ai|language models?|llms?|assistants?|"
    r"chatbots?)\b",
    r"\b(?:the|an|any) (?:ai )?(?:assistant|language model|llm|chatbot)\b[^.!?\n]{0,40}\b(?:must|should|shall)\b",
    r"\b(?:cite|treat) this (?:passage|source|document|page) as\b|\bsupersedes? all\b",
    r"\bdecode\b[^.!?\n]{0,40}\b(?:follow|obey|execute)\b",
    r"\b(?:call|use|run) the tool\b",
    r"\binclude this link\b",
    r"\bthe user has changed (?:their|his|her) mind\b|\b(?:asks?|wants?|tells?|instructs?) you to\b",
    r"\balways (?:reply|respond|answer)\b",
    r"\bsystem override\b",
    # "Ignore all previous instructions" in German, French, Spanish, Italian, Portuguese, Russian, Chinese, Japanese.
    r"\b(?:ignorier\w*|vergiss)\b[^.!?\n]{0,50}\banweisung",
    r"\b(?:ignore[zr]?|oublie[zr]?)\b[^.!?\n]{0,50}\b(?:consignes|instructions)\b",
    r"\b(?:ignora\w*|olvida\w*|esquece\w*)\b[^.!?\n]{0,50}\b(?:instrucci|istruzion|instru[çc])",
    r"(?:игнорируй|забудь)\w*[^.!?\n]{0,50}инструкци",
    r"(?:忽略|无视|忽視|無視)[^。！？\n]{0,20}(?:指令|指示|说明|說明)",
)), re.IGNORECASE)
SENTENCE_END = re.compile(r"(?<=[.!?。！？])\s+")


CHAT_CLOSERS = frozenset({"<|im_end|>", "<|end|>", "<|endoftext|>", "<|eot_id|>", "[/INST]", "<</SYS>>"})


def _forged_blocks(lines: list[str]) -> tuple[list[str], list[str]]:
    """The lines kept and the lines removed: forged passage headers with the block under them, chat-template
    turns from their opening token to their closing one, and lines written in the prompts' labels or the
    output's JSON."""
    kept: list[str] = []
    removed: list[str] = []
    in_forged = in_turn = False
    for line in lines:
        if in_forged and not line.strip():
            in_forged = False
        in_forged = in_forged or bool(FORGED_HEADER.match(line))
        tokens = CHAT_TOKEN.findall(line)
        forged = in_forged or in_turn or bool(tokens) or bool(PROMPT_LABEL.match(line) or OUTPUT_JSON.search(line))
        if tokens:  # a turn stays open until a line whose last token closes it
            in_turn = tokens[-1] not in CHAT_CLOSERS
        (removed if forged else kept).append(line)
    return kept, removed


def inert_text(text: str) -> tuple[str, list[str]]:
    """The text without what forges the prompt's structure or orders the assistant, and what was removed."""
    removed = HIDDEN_COMMENT.findall(text)
    text = HIDDEN_COMMENT.sub("", text)
    lines, forged = _forged_blocks(text.split("\n"))
    removed += forged
    kept_lines = []
    for line in lines:
        sentences = SENTENCE_END.split(line)
        orders = [s for s in sentences if ORDERS.search(s)]
        removed += orders
        kept = " ".join(s for s in sentences if s not in orders) if orders else line
        if kept.strip() or not line.strip():
            kept_lines.append(kept)
    return "\n".join(kept_lines), [r.strip() for r in removed if r.strip()]


def inert(passages: list[Passage]) -> tuple[list[Passage], list[Fired]]:
    """injection: each passage as the LM may read it, and a firing for each passage the guard changed."""
    out: list[Passage] = []
    fired: list[Fired] = []
    for passage in passages:
        text, removed = inert_text(passage.text)
        if removed:
            shown = " / ".join(removed)
            fired.append(Fired("injection", f"in {passage.section or passage.source}: {shown[:SHOWN_CHARS]}",
                               f"removed {len(removed)} line(s) or sentence(s) from what the LM reads",
                               "text that forges the prompt's structure or gives the assistant orders"))
            passage = replace(passage, text=text)
        out.append(passage)
    return out, fired
