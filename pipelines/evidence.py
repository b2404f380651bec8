"""What the answer is written from: the one-shot evidence for the question (the baseline's, and the deep
program's floor), and the deep program's final evidence, that floor plus each step's reranked passages."""

from collections.abc import Sequence

from dspy_rag.pipelines.guards import Fired
from dspy_rag.pipelines.injection_guard import inert
from dspy_rag.reranker import Reranker
from dspy_rag.retrieval import Passage, Retriever, fuse
from dspy_rag.web import WebSearch, WebSearchError

CHARS_PER_TOKEN = 3.5  # English prose in Qwen's tokenizer; passages are budgeted in characters
ANSWER_RESERVE_TOKENS = 1200  # the instruction, question, notes, demos and the reply


def question_passages(question: str, retriever: Retriever, reranker: Reranker | None, web: WebSearch | None,
                      top_n: int, injection_guard: bool = True) -> tuple[list[Passage], str | None, list[Fired]]:
    """The question's own hybrid ranking (fused with the web's, when on), made inert by the injection guard (when
    on) and reranked to top_n; the web's error, if it failed (the documents answer then); and the guard's
    firings."""
    rankings = [retriever.search(question, "hybrid")]
    web_error = None
    if web is not None:
        try:
            rankings.append(web.search(question, retriever.top_k))
        except WebSearchError as exc:
            web_error = str(exc)
    _, top, fired = reranked(question, fuse(rankings, retriever.rrf_k), reranker, top_n, injection_guard)
    return top, web_error, fired


def reranked(query: str, candidates: list[Passage], reranker: Reranker | None, top_n: int,
             injection_guard: bool) -> tuple[list[Passage], list[Passage], list[Fired]]:
    """The candidates made inert by the injection guard (when on), their top_n by the reranker (else by rank),
    and the guard's firings."""
    fired: list[Fired] = []
    if injection_guard:
        candidates, fired = inert(candidates)
    top = reranker.rerank(query, candidates, top_n) if reranker and candidates else candidates[:top_n]
    return candidates, top, fired


def evidence_chars(context_window: int) -> int:
    """The characters of passages an answer prompt can hold in the model's context window."""
    return max(0, int((context_window - ANSWER_RESERVE_TOKENS) * CHARS_PER_TOKEN))


def final_evidence(floor: Sequence[Passage], steps: Sequence[Sequence[Passage]], chars: int) -> list[Passage]:
    """The floor whole, then the steps' passages taking turns by rank (each step's best first), each passage
    once, while they fit in `chars`."""
    chosen = list(dict((p.id, p) for p in floor).values())
    used = sum(len(p.text) for p in chosen)
    seen = {p.id for p in chosen}
    for rank in range(max((len(s) for s in steps), default=0)):
        for passages in steps:
            if rank < len(passages) and (p := passages[rank]).id not in seen and used + len(p.text) <= chars:
                chosen.append(p)
                seen.add(p.id)
                used += len(p.text)
    return chosen
