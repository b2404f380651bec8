"""Train a cross-encoder reranker from the packaged MiniLM on relevance pairs from multi-hop trainsets.

Positives are the gold passages of each question (HotpotQA `supporting_facts`, MuSiQue `is_supporting`);
negatives are the other passages shown with the same question, which share its entities and so teach
the reranker what a keyword or vector match alone gets wrong. A share of the questions is held out
(by a hash of their id, so the split is stable) and recorded, so evaluation can stay on unseen questions.
"""

import hashlib
import os
import random
import shutil
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass
from pathlib import Path

from dspy_rag.files import write_json_atomic
from dspy_rag.trainsets.formats import CorpusPassage, Question

Pair = tuple[str, str, float]


@dataclass
class TrainingSummary:
    base_model: str
    datasets: list[str]
    pairs: int
    positives: int
    trained_questions: int
    held_out_question_ids: list[str]
    epochs: int
    learning_rate: float
    loss_by_epoch: list[float]
    seconds: float


def is_held_out(question: Question, share: float) -> bool:
    bucket = int(hashlib.sha256(question.id.encode()).hexdigest()[:8], 16) / 0xFFFFFFFF
    return bucket < share


def relevance_pairs(questions: list[Question], corpus: dict[str, CorpusPassage]) -> list[Pair]:
    pairs = []
    for question in questions:
        for ids, label in ((question.gold_passages, 1.0), (question.distractors, 0.0)):
            pairs += [(question.question, f"{corpus[i].title}\n{corpus[i].text}", label) for i in ids if i in corpus]
    return pairs


def train(pairs: list[Pair], base: Path, out: Path, epochs: int = 2, batch_size: int = 16,
          learning_rate: float = 4e-5, progress: Callable[[int, int, float], None] = lambda *_: None
          ) -> list[float]:
    """Fine-tune with binary cross-entropy; writes the model to `out` only when training completes."""
    import torch
    from transformers import AutoModelForSequenceClassification, AutoTokenizer

    from dspy_rag.reranker import MAX_LENGTH

    torch.manual_seed(0)
    torch.set_num_threads(os.cpu_count() or 1)
    tokenizer = AutoTokenizer.from_pretrained(str(base))
    model = AutoModelForSequenceClassification.from_pretrained(str(base), num_labels=1)
    optimizer = torch.optim.AdamW(model.parameters(), lr=learning_rate, weight_decay=0.01)
    steps = epochs * -(-len(pairs) // batch_size)
    schedule = torch.optim.lr_scheduler.LambdaLR(optimizer, lambda s: min(1.0, (s + 1) / (0.1 * steps + 1))
                                                 * max(0.0, (steps - s) / steps))
    positives = sum(label for *_, label in pairs)
    loss_fn = torch.nn.BCEWithLogitsLoss(pos_weight=torch.tensor((len(pairs) - positives) / max(positives, 1)))
    order = list(range(len(pairs)))
    losses, step = [], 0
    model.train()
    for _ in range(epochs):
        random.Random(len(losses)).shuffle(order)
        total = 0.0
        for start in range(0, len(order), batch_size):
            batch = [pairs[i] for i in order[start : start + batch_size]]
            encoded = tokenizer([q for q, _, _ in batch], [p for _, p, _ in batch], truncation="only_second",
                                max_length=MAX_LENGTH, padding=True, return_tensors="pt")
            loss = loss_fn(model(**encoded).logits[:, 0], torch.tensor([label for *_, label in batch]))
            loss.backward()
            torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
            optimizer.step()
            schedule.step()
            optimizer.zero_grad()
            total += loss.item() * len(batch)
            step += 1
            progress(step, steps, loss.item())
        losses.append(total / len(pairs))
    partial = out.with_name(out.name + ".partial")
    shutil.rmtree(partial, ignore_errors=True)
    model.save_pretrained(str(partial), safe_serialization=True)
    tokenizer.save_pretrained(str(partial))
    return losses


def train_reranker(datasets: list[tuple[str, list[Question], list[CorpusPassage]]], base: Path, out: Path,
                   held_out_share: float = 0.3, epochs: int = 2,
                   progress: Callable[[int, int, float], None] = lambda *_: None) -> TrainingSummary:
    """Train on the questions not held out; the folder appears complete (model, tokenizer, training.json) or not at all."""
    started = time.perf_counter()
    pairs, held_out, trained = [], [], 0
    for _, questions, corpus in datasets:
        by_id = {p.id: p for p in corpus}
        kept = [q for q in questions if not is_held_out(q, held_out_share)]
        held_out += [q.id for q in questions if is_held_out(q, held_out_share)]
        trained += len(kept)
        pairs += relevance_pairs(kept, by_id)
    learning_rate = 4e-5
    losses = train(pairs, base, out, epochs=epochs, learning_rate=learning_rate, progress=progress)
    summary = TrainingSummary(
        base_model="local/all-minilm-l6-v2", datasets=[name for name, _, _ in datasets], pairs=len(pairs),
        positives=int(sum(label for *_, label in pairs)), trained_questions=trained,
        held_out_question_ids=held_out, epochs=epochs, learning_rate=learning_rate, loss_by_epoch=losses,
        seconds=round(time.perf_counter() - started, 1))
    partial = out.with_name(out.name + ".partial")
    write_json_atomic(partial / "training.json", asdict(summary))
    if out.exists():
        shutil.rmtree(out)
    os.replace(partial, out)
    return summary
