"""The precision stage: a cross-encoder reads query and passage together and keeps the best top_n.

Online, a standard cross-encoder loads by name (cross-encoder/ms-marco-MiniLM-L-6-v2). Offline no package
ships one, so `dspy-rag train-reranker` trains one from the packaged MiniLM (optimizers/train_reranker.py)
into artifacts/rerankers/, which `retrieval.reranker: auto` then picks up.

A cross-encoder started from a sentence-embedding model has no trained relevance head: a classifier on its
CLS token starts at chance and ~100 training questions do not teach it (loss stayed at chance, recall fell).
So the trained reranker keeps MiniLM's own scoring, the cosine of mean-pooled token states, but pools the
query part and the passage part of one joint sequence. Attention across the two parts carries a learned
bias per layer and head that starts at -4: untrained, the model ranks close to the bi-encoder (vector
search), and training moves it from there instead of from noise.

Trained on ~100 questions the scores alone do not beat hybrid recall (they carry no BM25 evidence), so the
trained reranker orders candidates by RRF of its scores' ranking and the first stage's, then lets the best
passage pull up the candidates it names (`bridged`). reranker.json says which of these it does.
"""

import hashlib
import json
import os
import re
from dataclasses import asdict, dataclass, replace
from pathlib import Path
from typing import Any, Protocol

import numpy as np
import torch
from safetensors.torch import load_file, save_file
from tokenizers import Tokenizer

from dspy_rag.config import CORES, Config
from dspy_rag.errors import UserError
from dspy_rag.files import shipped_artifacts
from dspy_rag.retrieval import Passage

DEFAULT_NAME = "minilm"
MAX_LENGTH = 256
SETTINGS_FILE = "reranker.json"
WEIGHTS_FILE = "model.safetensors"
TRAINING_FILE = "training.json"
SHIPPED = shipped_artifacts() / "rerankers"  # the reranker that comes with the tool
ARCHITECTURE = "minilm-segment-cosine"


class Reranker(Protocol):
    name: str
    settings: dict[str, Any]  # what the reranker does, for reports

    def rerank(self, query: str, passages: list[Passage], top_n: int) -> list[Passage]: ...


def ranked(passages: list[Passage], scores: np.ndarray) -> list[Passage]:
    return [replace(passages[i], score=float(scores[i])) for i in np.argsort(-scores, kind="stable")]


def fused(passages: list[Passage], scores: np.ndarray, k: int) -> list[Passage]:
    """Passages (in first-stage order) by RRF of that order and the scores' order; ties go to the higher
    score. Each passage carries its cross-encoder score."""
    by_score = np.argsort(-scores, kind="stable")
    score_rank = np.empty(len(scores), dtype=int)
    score_rank[by_score] = np.arange(1, len(scores) + 1)
    fusion = 1.0 / (k + score_rank) + 1.0 / (k + np.arange(1, len(scores) + 1))
    order = sorted(range(len(passages)), key=lambda i: (-fusion[i], score_rank[i]))
    return [replace(passages[i], score=float(scores[i])) for i in order]


def names(text: str, title: str) -> bool:
    """Whether `text` names the subject of a passage titled `title` ("Laie, Hawaii" and "Laie (town)" by
    "Laie"), as a whole word; names under four letters match too much to count."""
    name = re.split(r" \(|, ", title)[0].strip().lower()
    return len(name) >= 4 and re.search(rf"\b{re.escape(name)}\b", text.lower()) is not None


def bridged(order: list[Passage]) -> list[Passage]:
    """The candidates the best passage names move up right behind it.

    A multi-hop question's second passage is often one the question never names but the first passage does
    (HotpotQA's bridge entity: a song "written by Jack Owens after attending a luau in Laie" leads to "Laie,
    Hawaii"). No query-passage score can see that link; the titles of the other candidates can.
    """
    if not order:
        return order
    top, rest = order[0], order[1:]
    named = [p for p in rest if p.section != top.section and names(top.text, p.section)]
    return [top, *named, *(p for p in rest if p not in named)]


class CrossEncoderReranker:
    """A standard sequence-classification cross-encoder by name or folder (sentence-transformers' CrossEncoder);
    its scores are the raw relevance logits."""

    def __init__(self, name_or_path: str) -> None:
        from sentence_transformers import CrossEncoder

        try:
            # safetensors only: pickled weights (pytorch_model.bin) are never opened. Identity, not the default
            # sigmoid: a passage carries the model's logit as its score.
            self.model = CrossEncoder(name_or_path, num_labels=1, max_length=MAX_LENGTH, device="cpu",
                                      activation_fn=torch.nn.Identity(), model_kwargs={"use_safetensors": True})
        except (OSError, ValueError) as exc:  # ValueError: a folder that holds no model (transformers' own words)
            raise UserError(f"cannot load reranker '{name_or_path}' (it needs model.safetensors); offline, train one "
                            "with `dspy-rag train-reranker` or set retrieval.reranker: none") from exc
        self.name = name_or_path
        self.settings = {"architecture": "sequence-classification", "max_length": MAX_LENGTH}

    def scores(self, query: str, texts: list[str], batch_size: int = 16) -> np.ndarray:
        torch.set_num_threads(os.cpu_count() or 1)
        if not texts:
            return np.zeros(0, dtype=np.float32)
        # A long passage is cut, never the query.
        return self.model.predict([(query, text) for text in texts], batch_size=batch_size, show_progress_bar=False,
                                  processing_kwargs={"text": {"truncation": "only_second"}})

    def rerank(self, query: str, passages: list[Passage], top_n: int) -> list[Passage]:
        return ranked(passages, self.scores(query, [p.text for p in passages]))[:top_n]


# --- the trained MiniLM reranker ---------------------------------------------------------------------
# Module names follow the BERT checkpoint's keys, so MiniLM's safetensors load into it unchanged.


def _module(**children: torch.nn.Module) -> torch.nn.Module:
    module = torch.nn.Module()
    for name, child in children.items():
        module.add_module(name, child)
    return module


class _Layer(torch.nn.Module):
    def __init__(self, hidden: int, inner: int, heads: int, eps: float) -> None:
        super().__init__()
        self.heads = heads
        linear = torch.nn.Linear
        self.attention = _module(
            self=_module(query=linear(hidden, hidden), key=linear(hidden, hidden), value=linear(hidden, hidden)),
            output=_module(dense=linear(hidden, hidden), LayerNorm=torch.nn.LayerNorm(hidden, eps=eps)))
        self.intermediate = _module(dense=linear(hidden, inner))
        self.output = _module(dense=linear(inner, hidden), LayerNorm=torch.nn.LayerNorm(hidden, eps=eps))

    def forward(self, x: torch.Tensor, bias: torch.Tensor) -> torch.Tensor:
        batch, length, hidden = x.shape
        attention = self.attention

        def heads(t: torch.Tensor) -> torch.Tensor:
            return t.view(batch, length, self.heads, hidden // self.heads).transpose(1, 2)

        q, k, v = (heads(getattr(attention.self, n)(x)) for n in ("query", "key", "value"))
        mixed = torch.nn.functional.scaled_dot_product_attention(q, k, v, attn_mask=bias)
        x = attention.output.LayerNorm(x + attention.output.dense(mixed.transpose(1, 2).reshape(batch, length, hidden)))
        inner = torch.nn.functional.gelu(self.intermediate.dense(x))
        return self.output.LayerNorm(x + self.output.dense(inner))


class SegmentCosineEncoder(torch.nn.Module):
    """MiniLM over `query ++ passage` (positions restart at the passage, as if encoded apart), scored by
    scale * cosine(mean of query states, mean of passage states); `cross_gate` biases cross-part attention."""

    def __init__(self, config: dict[str, Any], gate: float = -4.0, scale: float = 20.0) -> None:
        super().__init__()
        hidden, layers, heads = config["hidden_size"], config["num_hidden_layers"], config["num_attention_heads"]
        eps = config["layer_norm_eps"]
        self.embeddings = _module(
            word_embeddings=torch.nn.Embedding(config["vocab_size"], hidden),
            position_embeddings=torch.nn.Embedding(config["max_position_embeddings"], hidden),
            token_type_embeddings=torch.nn.Embedding(config["type_vocab_size"], hidden),
            LayerNorm=torch.nn.LayerNorm(hidden, eps=eps))
        self.encoder = _module(layer=torch.nn.ModuleList(
            _Layer(hidden, config["intermediate_size"], heads, eps) for _ in range(layers)))
        self.cross_gate = torch.nn.Parameter(torch.full((layers, heads), gate))
        self.scale = torch.nn.Parameter(torch.tensor(scale))

    def forward(self, ids: torch.Tensor, positions: torch.Tensor, parts: torch.Tensor, mask: torch.Tensor
                ) -> torch.Tensor:
        """`parts` is 0 on query tokens and 1 on passage tokens; `mask` is 0 on padding."""
        e = self.embeddings
        x = e.LayerNorm(e.word_embeddings(ids) + e.position_embeddings(positions)
                        + e.token_type_embeddings(torch.zeros_like(ids)))
        padding = (1.0 - mask[:, None, None, :].to(x.dtype)) * torch.finfo(x.dtype).min
        cross = (parts[:, :, None] != parts[:, None, :]).to(x.dtype)[:, None]
        for gate, layer in zip(self.cross_gate, self.encoder.layer, strict=True):
            x = layer(x, padding + cross * gate[None, :, None, None])
        weights = mask.to(x.dtype)

        def pooled(part: int) -> torch.Tensor:
            w = (weights * (parts == part))[..., None]
            return torch.nn.functional.normalize((x * w).sum(1) / w.sum(1).clamp(min=1), dim=-1)

        return self.scale * (pooled(0) * pooled(1)).sum(-1)


class SegmentTokenizer:
    """`[CLS] query [SEP]` then `[CLS] passage [SEP]`, each cut to its own length, as id/position/part tensors."""

    def __init__(self, path: Path, query_tokens: int, passage_tokens: int) -> None:
        self.tokenizer = Tokenizer.from_file(str(path))
        self.tokenizer.no_truncation()
        self.tokenizer.no_padding()
        self.query_tokens, self.passage_tokens = query_tokens, passage_tokens

    @staticmethod
    def _cut(ids: list[int], length: int) -> list[int]:
        return ids if len(ids) <= length else ids[: length - 1] + ids[-1:]  # keep the closing [SEP]

    def __call__(self, query: str, texts: list[str]) -> tuple[torch.Tensor, ...]:
        q = self._cut(self.tokenizer.encode(query).ids, self.query_tokens)
        passages = [self._cut(e.ids, self.passage_tokens) for e in self.tokenizer.encode_batch(texts)]
        width = len(q) + max(map(len, passages))
        rows = [(q + p, [*range(len(q)), *range(len(p))], [0] * len(q) + [1] * len(p)) for p in passages]
        ids, positions, parts = ([row[n] + [0] * (width - len(row[n])) for row in rows] for n in range(3))
        mask = [[1] * len(row[0]) + [0] * (width - len(row[0])) for row in rows]
        return torch.tensor(ids), torch.tensor(positions), torch.tensor(parts), torch.tensor(mask)


@dataclass(frozen=True)
class MiniLMSettings:
    """reranker.json: how the trained reranker reads and orders."""

    architecture: str = ARCHITECTURE
    query_tokens: int = 64
    # Most passages are 50-200 tokens; 160 keeps nine in ten whole and costs less than 256.
    passage_tokens: int = 160
    fuse_rrf_k: int | None = 60  # fuse with the first-stage order by RRF (retrieval's k); None: scores alone
    bridge: bool = True


class MiniLMReranker:
    """The reranker `dspy-rag train-reranker` writes: config.json, tokenizer.json, model.safetensors and
    reranker.json; no pickle anywhere. Also built from the plain MiniLM folder, to train it."""

    def __init__(self, folder: Path, options: MiniLMSettings = MiniLMSettings(), gate: float = -4.0) -> None:
        self.model = SegmentCosineEncoder(json.loads((folder / "config.json").read_text(encoding="utf-8")), gate)
        wanted = self.model.state_dict()
        # A plain MiniLM checkpoint also holds a pooler and position ids, and has no gate or scale yet.
        state = {k: v for k, v in load_file(str(folder / WEIGHTS_FILE)).items() if k in wanted}
        missing = set(self.model.load_state_dict(state, strict=False).missing_keys) - {"cross_gate", "scale"}
        if missing:
            raise UserError(f"{folder} is not a MiniLM checkpoint: it lacks {sorted(missing)[:3]}")
        self.model.eval()
        self.tokenize = SegmentTokenizer(folder / "tokenizer.json", options.query_tokens, options.passage_tokens)
        self.options = options
        self.settings = asdict(options)
        self.bridge = options.bridge
        self.name = str(folder)

    @classmethod
    def load(cls, folder: Path) -> "MiniLMReranker":
        """The reranker in `folder`; its weights must match the checksum its training.json records, if any."""
        manifest = folder / TRAINING_FILE
        expected = json.loads(manifest.read_text(encoding="utf-8")).get("sha256") if manifest.is_file() else None
        if expected is not None and weights_sha256(folder) != expected:
            raise UserError(f"{folder / WEIGHTS_FILE} does not match the sha256 in {manifest}: the file is damaged; "
                            "restore it (git checkout) or retrain it with `dspy-rag train-reranker`")
        return cls(folder, MiniLMSettings(**json.loads((folder / SETTINGS_FILE).read_text(encoding="utf-8"))))

    def scores(self, query: str, texts: list[str], batch_size: int = 10) -> np.ndarray:
        # Reranking runs between LM calls, so it has the cores to itself: on 2 idle cores 20 passages take 0.64 s
        # on two threads against 1.1 s on one (beside another CPU job one thread is faster).
        torch.set_num_threads(CORES)
        # Similar lengths share a batch, so little compute goes to padding.
        order = sorted(range(len(texts)), key=lambda i: len(texts[i]))
        result = np.zeros(len(texts), dtype=np.float32)
        with torch.inference_mode():
            for start in range(0, len(order), batch_size):
                chosen = order[start : start + batch_size]
                result[chosen] = self.model(*self.tokenize(query, [texts[i] for i in chosen])).numpy()
        return result

    def reorder(self, query: str, passages: list[Passage], bridge: bool) -> list[Passage]:
        """All passages (given in first-stage order) in the reranker's order, bridged or not."""
        scores = self.scores(query, [p.text for p in passages])
        k = self.options.fuse_rrf_k
        order = fused(passages, scores, k) if k is not None else ranked(passages, scores)
        return bridged(order) if bridge else order

    def rerank(self, query: str, passages: list[Passage], top_n: int) -> list[Passage]:
        return self.reorder(query, passages, self.bridge)[:top_n]

    def save(self, folder: Path, base: Path) -> None:
        """fp16 weights: half the size, the same held-out recall (they load back into fp32 parameters)."""
        folder.mkdir(parents=True, exist_ok=True)
        save_file({k: (v.half() if v.is_floating_point() else v).contiguous() for k, v in self.model.state_dict().items()},
                  str(folder / WEIGHTS_FILE))
        for name in ("config.json", "tokenizer.json"):
            (folder / name).write_bytes((base / name).read_bytes())
        (folder / SETTINGS_FILE).write_text(json.dumps(self.settings, indent=1), encoding="utf-8")


def weights_sha256(folder: Path) -> str:
    return hashlib.sha256((folder / WEIGHTS_FILE).read_bytes()).hexdigest()


def trained_folder(config: Config, name: str = DEFAULT_NAME) -> Path:
    """Where `train-reranker` writes: the configured artifacts folder."""
    return config.artifacts.path / "rerankers" / name


def auto_folder(config: Config) -> Path | None:
    """The reranker `auto` picks: one trained into the configured artifacts folder, else the shipped one."""
    return next((f for f in (trained_folder(config), SHIPPED / DEFAULT_NAME) if (f / TRAINING_FILE).is_file()), None)


def training_manifest(folder: Path) -> dict[str, object]:
    return json.loads((folder / TRAINING_FILE).read_text(encoding="utf-8"))


def open_reranker(name_or_path: str) -> Reranker:
    """A folder written by train-reranker (it has reranker.json), else a standard cross-encoder."""
    folder = Path(name_or_path)
    return MiniLMReranker.load(folder) if (folder / SETTINGS_FILE).is_file() else CrossEncoderReranker(name_or_path)


def load_reranker(config: Config) -> Reranker | None:
    """`auto`: the reranker trained into artifacts/ if there is one, else the shipped one; `none`; or a name or path."""
    choice = config.retrieval.reranker
    if choice == "none":
        return None
    if choice == "auto":
        folder = auto_folder(config)
        return open_reranker(str(folder)) if folder is not None else None
    return open_reranker(choice)
