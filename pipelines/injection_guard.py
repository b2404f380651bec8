"""injection: the guard that keeps a passage's instructions inert. Passage text that forges the prompt's own
structure (a passage header, a chat-template turn or DSPy field marker, a pair of the prompts' labels such as
"Question:"/"Answer:", a reply in the output's JSON, a hidden comment) or that orders the assistant (ignore the
previous instructions, reply only with, reveal the system prompt or a key, a note to AI models) is removed from
what the LM reads, before any call sees it; a passage left with nothing is dropped. The index keeps the document
whole; the trajectory says what was removed and why, and a cited sentence that only removed text could support
is flagged by the citation check like any other.

Every pattern names its addressee or the prompts' own syntax, so prose about instructions, assistants or
answers passes: "the assistant coach must", "reply only to", "read the safety instructions".
"""

import re
from dataclasses import replace

from dspy_rag.pipelines.guards import Fired
from dspy_rag.retrieval import Passage

SHOWN_CHARS = 160  # of the removed text, in the trajectory
MAX_TURN_LINES = 12  # a chat turn never closed ends here, not at the end of the passage

# A line opening like the prompts' own passage headers ("[2] corvid-official.pdf | Specifications") claims a source
# it does not have: it and the line under it are a forged passage.
FORGED_HEADER = re.compile(r"^\s*\[\d{1,3}\]\s+[^\n|]{1,200}\|")
CHAT_TOKEN = re.compile(r"<\|[^|\n>]{1,40}\|>|\[/?INST\]|<</?SYS>>|\[\[ ## \w+ ## \]\]")
CHAT_CLOSERS = frozenset({"<|im_end|>", "<|end|>", "<|endoftext|>", "<|eot_id|>", "[/INST]", "<</SYS>>",
                          "[[ ## completed ## ]]"})
# The labels the prompts and their demos are written in: forged only two in a row (a question and its answer).
PROMPT_LABEL = re.compile(r"^\s*(?:\*\*)?(?:question|short answer|answer|system|assistant|user)(?:\*\*)?\s*:",
                          re.IGNORECASE)
OUTPUT_JSON = re.compile(r"^\s*\{.*\"(?:short_answer|answer|citations|decision|finding)\"\s*:")
HIDDEN_COMMENT = re.compile(r"<!--.*?(?:-->|\Z)", re.DOTALL)  # an unclosed one runs to the end, as in a browser

_AI = r"(?:ai(?: assistants?| models?)?|language models?|llms?|chatbots?|gpts?)"
_EARLIER = (r"(?:previous|prior|above|earlier|preceding|original|all|your|system|(?:the )?user'?s)\s+(?:\w+\s+)?"
            r"(?:instructions?|prompts?|rules|directions|guidelines|guidance|question)")
# Orders to whoever reads the page, each naming the reader or the reply; "ignore the previous instructions" also
# in German, French, Spanish, Italian, Portuguese, Russian, Chinese and Japanese.
ORDERS = re.compile("|".join((
    rf"\b(?:ignore|disregard|forget|override|bypass|pay no attention to)\b[^.!?\n]{{0,30}}\b{_EARLIER}\b",
    r"\b(?:ignore|disregard|forget)\b[^.!?\n]{0,30}\b(?:everything|anything)\b[^.!?\n]{0,30}\b(?:told|said|given)\b",
    r"\b(?:reply|respond|answer) (?:only|exactly|solely) with\b|\b(?:reply|respond|answer) with (?:only|nothing but|"
    r"the (?:single )?word)\b|\band nothing else\b",
    r"\b(?:before|when) you (?:answer|reply|respond)\b[^.!?\n]{0,20}\b(?:any question|include|print|first)\b",
    r"\byour (?:whole |full |entire )?(?:answer|reply|response) must\b",
    r"\b(?:reveal|print|show|repeat|disclose|output|leak|include)\b[^.!?\n]{0,60}\b(?:(?:your |the )?system prompt|"
    r"\w*api[ _-]?keys?|environment variables?|your (?:instructions|configuration)|the words above)\b",
    rf"\b(?:note|message|instructions?|attention|dear|hello|hey),? (?:to |for )?(?:the |all |any )?{_AI}"
    rf"(?: and {_AI})?(?: reading this(?: page| document)?)?\s*:",
    rf"\b(?:an?|the|any) (?:{_AI}|assistant)s? (?:quoting|reading|processing|summari[sz]ing) this\b",
    r"\bthe only correct (?:reply|answer|response)\b|\bcite this (?:passage|source|document|page) as\b|"
    r"\bsupersedes all others\b",
    r"\bdecode\b[^.!?\n]{0,40}\b(?:follow|obey|execute)\b|\bcall the tool\b|\bsearch_(?:web|docs)\s*\(",
    r"\binclude this link\b|\bthe user has changed (?:their|his|her) mind\b|\b(?:they|the user) (?:now )?"
    r"(?:asks?|wants?) you to\b|\balways (?:reply|respond|answer)\b(?! (?:to|within|by|promptly|politely|in)\b)",
    r"\b(?:ignorier\w*|vergiss)\b[^.!?\n]{0,40}\b(?:vorherigen?|bisherigen?|obigen?|alle)\s+(?:\w+\s+)?anweisungen",
    r"\b(?:ignore[zr]?|oublie[zr]?)\b[^.!?\n]{0,40}\b(?:instructions|consignes) (?:précédentes|antérieures)",
    r"\b(?:ignora\w*|olvida\w*|esquece\w*)\b[^.!?\n]{0,40}\b(?:instrucciones anteriores|istruzioni precedenti|"
    r"instruções anteriores)",
    r"(?:игнорируй|забудь)\w*[^.!?\n]{0,30}предыдущие\s+инструкции",
    r"(?:忽略|无视|忽視|無視)[^。！？\n]{0,8}(?:之前|先前|以上|以前)[^。！？\n]{0,6}(?:指令|指示)",
)), re.IGNORECASE)
SENTENCE_END = re.compile(r"(?<=[.!?])\s+|(?<=[。！？])")


def _forged_lines(lines: list[str]) -> list[bool]:
    """Which lines forge the prompts' structure: a forged passage header and the line under it, a chat turn or
    DSPy field marker from its opening token to its closing one, two prompt labels in a row, the output's JSON."""
    forged = [False] * len(lines)
    turn_left = 0
    for i, line in enumerate(lines):
        tokens = CHAT_TOKEN.findall(line)
        if tokens:
            turn_left = MAX_TURN_LINES if tokens[-1] not in CHAT_CLOSERS else 0
            forged[i] = True
        elif turn_left:
            turn_left -= 1
            forged[i] = True
        if FORGED_HEADER.match(line):
            forged[i] = True
            following = next((j for j in range(i + 1, len(lines)) if lines[j].strip()), None)
            if following is not None:
                forged[following] = True
        if OUTPUT_JSON.match(line):
            forged[i] = True
    labelled = [j for j, line in enumerate(lines) if PROMPT_LABEL.match(line)]
    for a, b in zip(labelled, labelled[1:], strict=False):
        if all(not lines[k].strip() for k in range(a + 1, b)):  # two labels with nothing but blank lines between
            forged[a] = forged[b] = True
    return forged


def inert_text(text: str) -> tuple[str, list[str]]:
    """The text without what forges the prompts' structure or orders the assistant, and what was removed."""
    removed = HIDDEN_COMMENT.findall(text)
    lines = HIDDEN_COMMENT.sub("", text).split("\n")
    kept_lines = []
    for line, forged in zip(lines, _forged_lines(lines), strict=True):
        if forged:
            removed.append(line)
            continue
        sentences = SENTENCE_END.split(line)
        orders = [s for s in sentences if ORDERS.search(s)]
        removed += orders
        kept = line
        for order in orders:
            kept = kept.replace(order, "", 1)
        kept = " ".join(kept.split()) if orders else line
        if kept.strip() or not line.strip():
            kept_lines.append(kept)
    return "\n".join(kept_lines), [r.strip() for r in removed if r.strip()]


def inert(passages: list[Passage]) -> tuple[list[Passage], list[Fired]]:
    """injection: each passage as the LM may read it (its text and section title), those left with no text
    dropped, and a firing for each passage the guard changed."""
    out: list[Passage] = []
    fired: list[Fired] = []
    for passage in passages:
        (text, removed), (section, from_title) = inert_text(passage.text), inert_text(passage.section)
        if removed or from_title:
            shown = " / ".join(from_title + removed)
            fired.append(Fired("injection", f"in {section or passage.source}: {shown[:SHOWN_CHARS]}",
                               f"removed {len(removed) + len(from_title)} line(s) or sentence(s) from what the LM "
                               f"reads" + ("" if text.strip() else ", and the passage with them"),
                               "text that forges the prompt's structure or gives the assistant orders"))
            passage = replace(passage, text=text, section=section)
        if passage.text.strip():
            out.append(passage)
    return out, fired
