"""A lean BERT encoder for the packaged all-MiniLM-L6-v2: the same weights and math as sentence-transformers.

Importing sentence-transformers (and with it transformers and scikit-learn) costs ~4 s on this class of
machine, more than retrieval and half an LM call; `ask` pays it on every run. This encoder needs only
torch, safetensors and tokenizers. A test pins it to sentence-transformers' output.
"""

import json
from pathlib import Path

import numpy as np
import torch
from safetensors.torch import load_file
from tokenizers import Tokenizer


class MiniLMEncoder:
    """Mean-pooled, L2-normalised BERT sentence embeddings from a sentence-transformers model folder."""

    def __init__(self, folder: Path) -> None:
        config = json.loads((folder / "config.json").read_text())
        max_length = json.loads((folder / "sentence_bert_config.json").read_text())["max_seq_length"]
        self.heads = config["num_attention_heads"]
        self.layers = config["num_hidden_layers"]
        self.eps = config["layer_norm_eps"]
        self.weights = load_file(str(folder / "model.safetensors"))
        self.tokenizer = Tokenizer.from_file(str(folder / "tokenizer.json"))
        self.tokenizer.enable_truncation(max_length)
        self.tokenizer.enable_padding(pad_id=config["pad_token_id"])

    def _layer_norm(self, x: torch.Tensor, name: str) -> torch.Tensor:
        w = self.weights
        return torch.nn.functional.layer_norm(x, x.shape[-1:], w[f"{name}.weight"], w[f"{name}.bias"], self.eps)

    def _linear(self, x: torch.Tensor, name: str) -> torch.Tensor:
        return torch.nn.functional.linear(x, self.weights[f"{name}.weight"], self.weights[f"{name}.bias"])

    def _forward(self, ids: torch.Tensor, types: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
        F, w = torch.nn.functional, self.weights
        positions = torch.arange(ids.shape[1])
        x = (w["embeddings.word_embeddings.weight"][ids] + w["embeddings.position_embeddings.weight"][positions]
             + w["embeddings.token_type_embeddings.weight"][types])
        x = self._layer_norm(x, "embeddings.LayerNorm")
        batch, length, hidden = x.shape
        head_dim = hidden // self.heads
        bias = (1.0 - mask[:, None, None, :].to(x.dtype)) * torch.finfo(x.dtype).min

        def split(t: torch.Tensor) -> torch.Tensor:
            return t.view(batch, length, self.heads, head_dim).transpose(1, 2)

        for i in range(self.layers):
            p = f"encoder.layer.{i}"
            q, k, v = (split(self._linear(x, f"{p}.attention.self.{n}")) for n in ("query", "key", "value"))
            context = F.scaled_dot_product_attention(q, k, v, attn_mask=bias)
            context = context.transpose(1, 2).reshape(batch, length, hidden)
            x = self._layer_norm(x + self._linear(context, f"{p}.attention.output.dense"), f"{p}.attention.output.LayerNorm")
            inner = F.gelu(self._linear(x, f"{p}.intermediate.dense"))
            x = self._layer_norm(x + self._linear(inner, f"{p}.output.dense"), f"{p}.output.LayerNorm")
        summed = (x * mask[..., None]).sum(1)
        pooled = summed / mask.sum(1, keepdim=True).clamp(min=1)
        return F.normalize(pooled, p=2, dim=1)

    def encode(self, texts: list[str], batch_size: int = 32) -> np.ndarray:
        rows = []
        # Sorting by length keeps padding (wasted compute) small inside each batch.
        order = sorted(range(len(texts)), key=lambda i: len(texts[i]))
        with torch.inference_mode():
            for start in range(0, len(order), batch_size):
                encodings = self.tokenizer.encode_batch([texts[i] for i in order[start : start + batch_size]])
                ids = torch.tensor([e.ids for e in encodings])
                types = torch.tensor([e.type_ids for e in encodings])
                mask = torch.tensor([e.attention_mask for e in encodings])
                rows.append(self._forward(ids, types, mask).numpy())
        vectors = np.concatenate(rows) if rows else np.zeros((0, 384), dtype=np.float32)
        result = np.empty_like(vectors)
        result[order] = vectors
        return result
