"""Train the MiniLM reranker (dspy_rag/reranker.py) on relevance groups from multi-hop trainsets.

Each training question is one group: its gold passages (HotpotQA `supporting_facts`, MuSiQue `is_supporting`)
against hard negatives, the passages shown with it that are not gold (they share its entities) and the
passages hybrid retrieval ranks highest for it over the whole corpus (what the reranker sees at run time).
The loss is listwise: a softmax over one gold passage and the group's negatives, for each gold passage.
Pointwise BCE on ~1,400 pairs left an earlier version at chance. A share of the questions is held out (by a
hash of their id, so the split is stable) and recorded, so evaluation can stay on unseen questions.
"""

import os
import random
import shutil
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass
from pathlib import Path

from dspy_rag.files import write_json_atomic
from dspy_rag.trainsets.corpus_index import is_held_out
from dspy_rag.trainsets.formats import CorpusPassage, Question

# A question, its relevant passage texts, its negative passage texts.
Group = tuple[str, list[str], list[str]]
Progress = Callable[[int, int, float], None]

MINED_DEPTH = 20
NEGATIVES_PER_STEP = 11
LEARNING_RATE = 5e-5
# Adam moves a parameter about lr per step: the cross-attention gates need far larger steps than the weights.
GATE_LEARNING_RATE = 0.05


@dataclass
class TrainingSummary:
    base_model: str
    architecture: str
    datasets: list[str]
    groups: int
    positives: int
    negatives: int
    trained_questions: int
    held_out_question_ids: list[str]
    epochs: int
    learning_rate: float
    loss: str
    loss_by_epoch: list[float]
    seconds: float
    sha256: str  # of model.safetensors: a damaged or swapped file is refused at load


def passage_text(passage: CorpusPassage) -> str:
    return f"{passage.title}\n{passage.text}"


def hybrid_top(questions: list[Question], passages: list[CorpusPassage], depth: int = MINED_DEPTH
               ) -> dict[str, list[str]]:
    """The first `depth` passage ids of a hybrid search (MiniLM cosine and BM25, fused by RRF) per question,
    done in memory as the index would, so training needs no index."""
    import numpy as np

    from dspy_rag.bm25 import LuceneBM25
    from dspy_rag.embeddings import SentenceEmbedding
    from dspy_rag.retrieval import reciprocal_rank_fusion
    from dspy_rag.tokenizer import tokenize

    texts = [passage_text(p) for p in passages]
    embed = SentenceEmbedding()
    vectors = np.asarray(embed.embed(texts, threads=os.cpu_count() or 1))
    queries = np.asarray(embed.embed([q.question for q in questions], threads=os.cpu_count() or 1))
    bm25 = LuceneBM25([tokenize(text) or [""] for text in texts])
    mined = {}
    for question, query in zip(questions, queries, strict=True):
        keyword = bm25.get_scores(tokenize(question.question))
        rankings = [np.argsort(-(vectors @ query))[:depth], np.argsort(-keyword)[:depth]]
        fused = reciprocal_rank_fusion([[passages[i].id for i in ranking] for ranking in rankings])
        mined[question.id] = [pid for pid, _ in fused[:depth]]
    return mined


def relevance_groups(questions: list[Question], corpus: dict[str, CorpusPassage],
                     mined: dict[str, list[str]] | None = None) -> list[Group]:
    """One group per question with gold passages: gold against its distractors and mined non-gold passages."""
    groups = []
    for question in questions:
        gold = [i for i in question.gold_passages if i in corpus]
        negatives = dict.fromkeys(i for i in (*question.distractors, *(mined or {}).get(question.id, []))
                                  if i in corpus and i not in question.gold_passages)
        if gold and negatives:
            groups.append((question.question, [passage_text(corpus[i]) for i in gold],
                           [passage_text(corpus[i]) for i in negatives]))
    return groups


def train(groups: list[Group], base: Path, out: Path, epochs: int = 2, learning_rate: float = LEARNING_RATE,
          progress: Progress = lambda *_: None) -> list[float]:
    """Fine-tune the reranker from `base` one group a step; writes it to `out`.partial when training completes."""
    import torch

    from dspy_rag.reranker import MiniLMReranker

    torch.manual_seed(0)
    torch.set_num_threads(os.cpu_count() or 1)
    reranker = MiniLMReranker(base)
    model = reranker.model
    gates = [model.cross_gate, model.scale]
    weights = [p for p in model.parameters() if all(p is not g for g in gates)]
    optimizer = torch.optim.AdamW([{"params": weights, "lr": learning_rate, "weight_decay": 0.01},
                                   {"params": gates, "lr": GATE_LEARNING_RATE, "weight_decay": 0.0}])
    steps = epochs * len(groups)
    schedule = torch.optim.lr_scheduler.LambdaLR(optimizer, lambda s: min(1.0, (s + 1) / (0.1 * steps + 1))
                                                 * max(0.0, (steps - s) / steps))
    rng = random.Random(0)
    order, losses, step = list(range(len(groups))), [], 0
    model.train()
    for _ in range(epochs):
        rng.shuffle(order)
        total = 0.0
        for index in order:
            query, positives, negatives = groups[index]
            sampled = rng.sample(negatives, min(NEGATIVES_PER_STEP, len(negatives)))
            scores = model(*reranker.tokenize(query, positives + sampled))
            relevant, other = scores[: len(positives)], scores[len(positives) :]
            # Each gold passage against all negatives: -log softmax of its score among them.
            together = torch.cat([relevant[:, None], other[None].expand(len(positives), -1)], dim=1)
            loss = (torch.logsumexp(together, dim=1) - relevant).mean()
            loss.backward()
            torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
            optimizer.step()
            schedule.step()
            optimizer.zero_grad()
            total += loss.item()
            step += 1
            progress(step, steps, loss.item())
        losses.append(round(total / len(groups), 4))
    partial = out.with_name(out.name + ".partial")
    shutil.rmtree(partial, ignore_errors=True)
    reranker.save(partial, base)
    return losses


def train_reranker(datasets: list[tuple[str, list[Question], list[CorpusPassage]]], base: Path, out: Path,
                   held_out_share: float = 0.3, epochs: int = 2, progress: Progress = lambda *_: None
                   ) -> TrainingSummary:
    """Train on the questions not held out; the folder appears complete (model, tokenizer, training.json) or not at all."""
    from dspy_rag.reranker import ARCHITECTURE, TRAINING_FILE, weights_sha256

    started = time.perf_counter()
    groups, held_out, trained = [], [], 0
    for _, questions, corpus in datasets:
        kept = [q for q in questions if not is_held_out(q, held_out_share)]
        held_out += [q.id for q in questions if is_held_out(q, held_out_share)]
        trained += len(kept)
        groups += relevance_groups(kept, {p.id: p for p in corpus}, hybrid_top(kept, corpus))
    losses = train(groups, base, out, epochs=epochs, progress=progress)
    partial = out.with_name(out.name + ".partial")
    summary = TrainingSummary(
        base_model="local/all-minilm-l6-v2", architecture=ARCHITECTURE, datasets=[name for name, _, _ in datasets],
        groups=len(groups), positives=sum(len(g[1]) for g in groups), negatives=sum(len(g[2]) for g in groups),
        trained_questions=trained, held_out_question_ids=held_out, epochs=epochs, learning_rate=LEARNING_RATE,
        loss="listwise softmax, one gold passage against the group's negatives", loss_by_epoch=losses,
        seconds=round(time.perf_counter() - started, 1), sha256=weights_sha256(partial))
    write_json_atomic(partial / TRAINING_FILE, asdict(summary))
    if out.exists():
        shutil.rmtree(out)
    os.replace(partial, out)
    return summary
