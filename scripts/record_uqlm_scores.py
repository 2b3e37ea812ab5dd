"""Record UQLM's white-box scores on the upstream fixtures and a few synthetic edge cases.

The output, ``tests/policies/fixtures/uqlm_scores.json``, is what ``tests/policies/test_scorers.py``
compares ``policies.scorers.score_logprobs`` against. It was produced with uqlm 0.6.7 by:

    python3 -m venv /tmp/uqlm-venv
    /tmp/uqlm-venv/bin/pip install --no-deps uqlm==0.6.7
    /tmp/uqlm-venv/bin/pip install numpy==1.26.4 scipy==1.14.1
    /tmp/uqlm-venv/bin/python scripts/record_uqlm_scores.py \
        --upstream tests/fixtures/upstream --out tests/policies/fixtures/uqlm_scores.json

``uqlm``'s package ``__init__`` imports every scorer, including the torch/transformers ones, so
this script loads only ``uqlm.white_box.top_logprobs`` and ``uqlm.white_box.single_logprobs`` (their
own imports are numpy and scipy) without executing the package ``__init__`` modules. Those are the
classes ``WhiteBoxUQ.score(logprobs_results=...)`` delegates to, built exactly as it builds them:
``TopLogprobsScorer(top_k_logprobs=K)`` and ``SingleLogprobsScorer(length_normalize=True)``.

It runs in that throwaway environment only: it imports nothing from this project. Every input
UQLM saw is stored in the output beside its scores (NaN is written as null).
"""

from __future__ import annotations

import argparse
import functools
import importlib
import importlib.metadata
import importlib.util
import json
import math
import sys
import types
from pathlib import Path
from typing import Any

TOP_SCORERS = ["mean_token_negentropy", "min_token_negentropy", "probability_margin"]
SINGLE_SCORERS = ["min_probability", "sequence_probability"]


@functools.cache
def load_uqlm_white_box() -> tuple[Any, Any]:
    """UQLM's TopLogprobsScorer and SingleLogprobsScorer classes, without the package __init__."""
    spec = importlib.util.find_spec("uqlm")
    if spec is None or not spec.submodule_search_locations:
        sys.exit("uqlm is not installed in this interpreter (see the module docstring)")
    root = Path(next(iter(spec.submodule_search_locations)))
    for name, path in (("uqlm", root), ("uqlm.white_box", root / "white_box")):
        package = types.ModuleType(name)
        package.__path__ = [str(path)]
        sys.modules[name] = package
    top = importlib.import_module("uqlm.white_box.top_logprobs")
    single = importlib.import_module("uqlm.white_box.single_logprobs")
    return top.TopLogprobsScorer, single.SingleLogprobsScorer


def uqlm_scores(content: list[dict[str, Any]], top_k: int) -> dict[str, float | None]:
    """UQLM's five white-box scores of one answer, NaN as None."""
    top_cls, single_cls = load_uqlm_white_box()
    top = top_cls(scorers=TOP_SCORERS, top_k_logprobs=top_k).evaluate([content])
    single = single_cls(scorers=SINGLE_SCORERS, length_normalize=True).evaluate([content])
    scores = {**top, **single}
    return {name: _json_float(scores[name][0]) for name in TOP_SCORERS + SINGLE_SCORERS}


def _json_float(value: Any) -> float | None:
    value = float(value)
    return None if math.isnan(value) else value


# --- inputs ------------------------------------------------------------------------------------


def content_of(body: Any) -> list[dict[str, Any]]:
    """``logprobs.content`` of a response body, or assembled from a list of stream chunks."""
    if isinstance(body, dict):
        return body["choices"][0]["logprobs"]["content"]
    content: list[dict[str, Any]] = []
    for chunk in body:
        if not isinstance(chunk, dict) or not chunk.get("choices"):
            continue  # "[DONE]"
        logprobs = chunk["choices"][0].get("logprobs") or {}
        content.extend(logprobs.get("content") or [])
    return content


def without_end_of_text(content: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Drop llama.cpp native mode's trailing end-of-text entry (empty token, no bytes)."""
    content = list(content)
    while content and content[-1].get("token") == "" and not content[-1].get("bytes"):
        content.pop()
    return content


def truncated(content: list[dict[str, Any]], top_k: int) -> list[dict[str, Any]]:
    """Each position's alternatives cut to the ``top_k`` most probable."""
    return [
        {**entry, "top_logprobs": sorted(entry["top_logprobs"], key=lambda a: -a["logprob"])[:top_k]}
        for entry in content
    ]


def entry(token: str, logprob: float, alternatives: list[float]) -> dict[str, Any]:
    """A synthetic content entry; the chosen token is listed among its alternatives."""
    return {
        "token": token,
        "logprob": logprob,
        "top_logprobs": [{"token": f"{token}#{i}", "logprob": lp} for i, lp in enumerate(alternatives)],
    }


def synthetic_cases() -> list[dict[str, Any]]:
    """Edge cases: (id, content, K) built from plain numbers (ln 0.5 etc.)."""
    ln = math.log
    two_token = [
        entry("A", ln(0.5), [ln(0.5), ln(0.3), ln(0.2)]),
        entry("B", ln(0.9), [ln(0.9), ln(0.05), ln(0.05)]),
    ]
    fewer = [*two_token, entry("C", ln(0.6), [ln(0.6), ln(0.4)])]
    unsorted = [{**e, "top_logprobs": list(reversed(e["top_logprobs"]))} for e in two_token]
    return [
        {"id": "synthetic/two_token/k3", "content": two_token, "top_k": 3},
        {"id": "synthetic/fewer_alternatives/k3", "content": fewer, "top_k": 3},
        {"id": "synthetic/unsorted_alternatives/k3", "content": unsorted, "top_k": 3},
        {
            "id": "synthetic/one_alternative_positions/k3",
            "content": [*two_token, entry("D", ln(0.7), [ln(0.7)])],
            "top_k": 3,
        },
        {
            "id": "synthetic/k1/k1",
            "content": [entry("A", ln(0.5), [ln(0.5)]), entry("B", ln(0.9), [ln(0.9)])],
            "top_k": 1,
        },
        {
            "id": "synthetic/uniform/k4",
            "content": [entry("A", ln(0.25), [ln(0.25)] * 4)],
            "top_k": 4,
        },
        {
            "id": "synthetic/near_certain_openai_floor/k3",
            "content": [entry("A", 0.0, [0.0, -9999.0, -9999.0])],
            "top_k": 3,
        },
        {"id": "synthetic/empty/k5", "content": [], "top_k": 5},
    ]


def upstream_cases(upstream: Path) -> list[dict[str, Any]]:
    """Each upstream answer as served, plus the variants on which UQLM and our scorers coincide.

    Our scorers: docs/contracts.md#scorers.
    """
    native_k = {
        "native_smol_top15.json": 15,
        "native_qwen_top20.json": 20,
        "native_gemma_top5.json": 5,
        "native_smol_stream.json": 5,
        "llamacpp_smol_top15.json": 15,
        "llamacpp_qwen_stream.json": 5,
    }
    smaller_k = {"native_smol_top15.json": [5], "native_qwen_top20.json": [15, 5]}
    cases = []
    for name, k in native_k.items():
        content = content_of(json.loads((upstream / name).read_text()))
        stem = name.removesuffix(".json")
        stripped = without_end_of_text(content)
        cases.append({"id": f"{stem}/as_served/k{k}", "source": name, "content": content, "top_k": k})
        if len(stripped) != len(content):
            cases.append(
                {"id": f"{stem}/no_end_of_text/k{k}", "source": name, "content": stripped, "top_k": k}
            )
        for small in smaller_k.get(name, []):
            cases.append(
                {"id": f"{stem}/as_served/k{small}", "source": name, "content": content, "top_k": small}
            )
            cases.append(
                {
                    "id": f"{stem}/no_end_of_text_top{small}/k{small}",
                    "source": name,
                    "content": truncated(stripped, small),
                    "top_k": small,
                }
            )
    return cases


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--upstream", type=Path, required=True, help="tests/fixtures/upstream")
    parser.add_argument("--out", type=Path, required=True)
    args = parser.parse_args()
    cases = upstream_cases(args.upstream) + synthetic_cases()
    for case in cases:
        case["uqlm"] = uqlm_scores(case["content"], case["top_k"])
    import numpy  # the throwaway environment's versions, recorded beside the scores
    import scipy

    document = {
        "producer": "scripts/record_uqlm_scores.py (see its docstring for the exact command)",
        "uqlm_version": importlib.metadata.version("uqlm"),
        "numpy_version": numpy.__version__,
        "scipy_version": scipy.__version__,
        "uqlm_classes": (
            "TopLogprobsScorer(top_k_logprobs=top_k), SingleLogprobsScorer(length_normalize=True)"
        ),
        "cases": {case.pop("id"): case for case in cases},
    }
    args.out.write_text(json.dumps(document, indent=1) + "\n")
    print(f"wrote {len(cases)} cases to {args.out}")


if __name__ == "__main__":
    main()
