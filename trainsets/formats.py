"""Question and corpus files in the formats of HotpotQA, MuSiQue, MultiHop-RAG and a generic JSONL.

Files load through the `datasets` library (a local path here; `hf://` paths work online). Every format
becomes the same `Question` and `CorpusPassage` records; a gold passage is named by the passage id its
corpus loader gives, so recall can be counted without caring where the data came from.
"""

import hashlib
import re
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

from dspy_rag import paths
from dspy_rag.errors import UserError

SEPARATOR = "+"  # between the names of pooled sets, in the names of what is fit or measured on them


def pooled_names(name: str) -> list[str]:
    """The sets a (pooled) trainset name stands for, in one order: sets pooled in another order are the same
    data."""
    return sorted(name.split(SEPARATOR))

Format = Literal["hotpotqa", "musique", "multihop-rag", "jsonl"]


@dataclass(frozen=True)
class Question:
    id: str
    question: str
    answer: str
    aliases: tuple[str, ...] = ()
    gold_passages: tuple[str, ...] = ()
    gold_sections: tuple[str, ...] = ()
    # Passages shown with the question that are not gold: hard negatives for reranker training.
    distractors: tuple[str, ...] = field(default=(), compare=False)
    # Generic JSONL only: the question's kind (e.g. "single-section", "10k+web"), its split ("train" or "dev")
    # and the titles or URLs of web pages that hold part of the evidence.
    kind: str = ""
    split: str = ""
    gold_web: tuple[str, ...] = ()
    # A gold research plan (steps with sub_question, tool and optionally section), from the dataset's own
    # decomposition (MuSiQue) or written by hand (generic JSONL): the planner's labeled demos.
    plan: tuple[dict[str, str], ...] = field(default=(), compare=False)
    # The sentences that state the answer, each with its paragraph (HotpotQA's supporting facts, MuSiQue's
    # supporting paragraphs, MultiHop-RAG's evidence facts): the synthesizer's labeled demos.
    support: tuple["Support", ...] = field(default=(), compare=False)


@dataclass(frozen=True)
class CorpusPassage:
    id: str
    title: str
    text: str

    @property
    def indexed_text(self) -> str:
        """The text as ingested: the title heads the paragraph, so a search for the subject finds it."""
        return f"{self.title}\n{self.text}"


@dataclass(frozen=True)
class Support:
    """Sentences of one paragraph that state part of a question's answer; none named when the dataset marks the
    whole paragraph (MuSiQue)."""

    passage: CorpusPassage
    sentences: tuple[str, ...]


def passage_id(title: str, text: str) -> str:
    return hashlib.sha256(f"{title}\n{text}".encode()).hexdigest()[:16]


def _rows(path: Path) -> list[dict[str, Any]]:
    import datasets

    if not str(path).startswith("hf://") and not paths.named(path, "questions or corpus file").is_file():
        raise UserError(f"{path} does not exist; pass a questions or corpus file")
    try:
        return list(datasets.load_dataset("json", data_files=str(path), split="train"))
    except Exception as exc:  # datasets wraps parse errors in several exception types
        raise UserError(f"{path} is not a JSON or JSONL dataset ({type(exc).__name__})") from exc


def detect_format(row: dict[str, Any]) -> Format:
    keys = set(row)
    if {"supporting_facts", "context"} <= keys:
        return "hotpotqa"
    if {"paragraphs", "question_decomposition"} <= keys:
        return "musique"
    if "evidence_list" in keys:
        return "multihop-rag"
    if {"id", "question", "answer"} <= keys:
        return "jsonl"
    raise UserError(f"unknown question format with fields {sorted(keys)}; see README for the generic JSONL")


def _hotpotqa(row: dict[str, Any]) -> Question:
    sentences = {title: list(lines) for title, lines in row["context"]}
    paragraphs = {t: CorpusPassage(passage_id(t, "".join(lines)), t, "".join(lines)) for t, lines in sentences.items()}
    gold_titles = [t for t in dict.fromkeys(title for title, _ in row["supporting_facts"]) if t in paragraphs]
    others = tuple(p.id for t, p in paragraphs.items() if t not in gold_titles)
    cited = {t: tuple(sentences[t][n].strip() for title, n in row["supporting_facts"] if title == t and n < len(sentences[t]))
             for t in gold_titles}
    support = tuple(Support(paragraphs[t], lines) for t, lines in cited.items() if lines)
    return Question(row["_id"], row["question"], row["answer"], (), tuple(paragraphs[t].id for t in gold_titles), (),
                    others, support=support)


_HOP_REFERENCE = re.compile(r"#(\d)")


def sub_question(hop: str) -> str:
    """A MuSiQue hop as a question: "Hello Love >> performer" asks for the performer of Hello Love, and "#1"
    stands for the answer of hop 1."""
    subject, arrow, relation = hop.partition(" >> ")
    text = f"What is the {relation.strip()} of {subject.strip()}?" if arrow else hop.strip()
    return _HOP_REFERENCE.sub(r"the answer of step \1", text)


def _musique(row: dict[str, Any]) -> Question:
    ids = {p["idx"]: passage_id(p["title"], p["paragraph_text"]) for p in row["paragraphs"]}
    gold = tuple(ids[p["idx"]] for p in row["paragraphs"] if p["is_supporting"])
    support = tuple(Support(CorpusPassage(ids[p["idx"]], p["title"], p["paragraph_text"]), ())
                    for p in row["paragraphs"] if p["is_supporting"])
    others = tuple(ids[p["idx"]] for p in row["paragraphs"] if not p["is_supporting"])
    plan = tuple({"sub_question": sub_question(hop["question"]), "tool": "search_docs"}
                 for hop in row.get("question_decomposition") or ())
    return Question(row["id"], row["question"], row["answer"], tuple(row.get("answer_aliases") or ()), gold, (), others,
                    plan=plan, support=support)


def _multihop_rag(row: dict[str, Any]) -> Question:
    # The Hub's MultiHopRAG.json names the question `query` and gives no id; a hash of the query stands in.
    question = row.get("question") or row["query"]
    question_id = row["id"] if "id" in row else hashlib.sha256(question.encode()).hexdigest()[:16]
    gold = tuple(dict.fromkeys(e["url"] for e in row["evidence_list"] if e.get("url")))
    # Each article's evidence facts stand for the passage retrieval would find (the whole article is too long).
    facts: dict[str, list[str]] = {url: [] for url in gold}
    titles = {e["url"]: e.get("title") or e["url"] for e in row["evidence_list"] if e.get("url")}
    for evidence in row["evidence_list"]:
        if evidence.get("url") and evidence.get("fact"):
            facts[evidence["url"]].append(evidence["fact"].strip())
    support = tuple(Support(CorpusPassage(url, titles[url], " ".join(lines)), tuple(lines))
                    for url, lines in facts.items() if lines)
    return Question(str(question_id), question, row["answer"], (), gold, support=support)


def _generic(row: dict[str, Any]) -> Question:
    return Question(str(row["id"]), row["question"], str(row["answer"]), tuple(row.get("aliases") or ()),
                    tuple(row.get("gold_passages") or ()), tuple(row.get("gold_sections") or ()),
                    kind=row.get("kind") or "", split=row.get("split") or "", gold_web=tuple(row.get("gold_web") or ()),
                    plan=tuple(row.get("plan") or ()))


_READERS: dict[Format, Callable[[dict[str, Any]], Question]] = {
    "hotpotqa": _hotpotqa, "musique": _musique, "multihop-rag": _multihop_rag, "jsonl": _generic}


def load_questions(path: Path) -> tuple[Format, list[Question]]:
    rows = _rows(path)
    if not rows:
        raise UserError(f"{path} holds no questions")
    kind = detect_format(rows[0])
    return kind, [_READERS[kind](row) for row in rows]


def load_corpus(path: Path) -> list[CorpusPassage]:
    """HotpotQA's {title: [sentences]}, MuSiQue's [{title, text}], a snapshot's {url, title, content} lines
    (MultiHop-RAG's {url, title, body}), or generic {id, title?, text} lines."""
    import json

    if path.suffix == ".json" and path.is_file():
        with path.open(encoding="utf-8") as handle:
            data = json.load(handle)
        if isinstance(data, dict):  # HotpotQA: one mapping, which datasets would read as a single row
            return [CorpusPassage(passage_id(t, "".join(s)), t, "".join(s)) for t, s in data.items()]
    passages = []
    for row in _rows(path):
        if "url" in row and ("content" in row or "body" in row):  # the Hub's MultiHop-RAG corpus says `body`
            passages.append(CorpusPassage(row["url"], row.get("title") or row["url"], row.get("content") or row["body"]))
        elif "id" in row and "text" in row:
            passages.append(CorpusPassage(str(row["id"]), row.get("title") or "", row["text"]))
        elif "title" in row and "text" in row:
            passages.append(CorpusPassage(passage_id(row["title"], row["text"]), row["title"], row["text"]))
        else:
            raise UserError(f"{path}: unknown corpus row with fields {sorted(row)}")
    return passages
