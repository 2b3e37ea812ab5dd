"""Scorers (docs/contracts.md#scorers): hand-computed values, upstream quirks, UQLM agreement, properties."""

from __future__ import annotations

import json
import math
import random
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from policies import UnknownScorerError, token_scores
from policies.scorers import SCORERS, TokenLogprobs, legacy_to_content, score_logprobs, score_response
from tests.support.data_files import UPSTREAM_ANSWERS

FIXTURES = Path(__file__).resolve().parent / "fixtures"
UQLM = json.loads((FIXTURES / "uqlm_scores.json").read_text())
UQLM_SCORERS = [
    "mean_token_negentropy",
    "min_token_negentropy",
    "probability_margin",
    "min_probability",
    "sequence_probability",
]
ALTERNATIVE_SCORERS = ["mean_token_negentropy", "min_token_negentropy", "probability_margin"]
CHOSEN_SCORERS = ["min_probability", "sequence_probability", "mean_logprob"]
ln = math.log


def entry(token: str, p_chosen: float, probs: list[float], **extra: Any) -> dict[str, Any]:
    """A content entry from plain probabilities (alternatives in the given order)."""
    return {
        "token": token,
        "logprob": ln(p_chosen),
        "top_logprobs": [{"token": f"{token}{i}", "logprob": ln(p)} for i, p in enumerate(probs)],
        **extra,
    }


def scores(content: list[dict[str, Any]] | None, top_k: int) -> dict[str, float | None]:
    return {name: score_logprobs(content, name, top_k) for name in SCORERS}


def upstream_content(name: str) -> list[dict[str, Any]]:
    """``logprobs.content`` of an upstream body, or assembled from its stream chunks in order."""
    body = json.loads((UPSTREAM_ANSWERS / name).read_text())
    if isinstance(body, dict):
        return body["choices"][0]["logprobs"]["content"]
    content: list[dict[str, Any]] = []
    for chunk in body:
        if isinstance(chunk, dict) and chunk.get("choices"):
            content.extend((chunk["choices"][0].get("logprobs") or {}).get("content") or [])
    return content


def assert_same(ours: float | None, theirs: float | None, tolerance: float = 1e-12) -> None:
    """Equal within ``tolerance`` (relative and absolute), or both missing."""
    if theirs is None:
        assert ours is None
    else:
        assert ours == pytest.approx(theirs, rel=tolerance, abs=tolerance)


# --- hand-computed values ----------------------------------------------------------------------

# Two positions, K=3: p = (0.5, 0.3, 0.2) choosing the first, then (0.9, 0.05, 0.05).
TWO_TOKEN = [entry("A", 0.5, [0.5, 0.3, 0.2]), entry("B", 0.9, [0.9, 0.05, 0.05])]
H_A = -(0.5 * ln(0.5) + 0.3 * ln(0.3) + 0.2 * ln(0.2))
H_B = -(0.9 * ln(0.9) + 2 * 0.05 * ln(0.05))
TWO_TOKEN_EXPECTED = {
    "mean_token_negentropy": ((1 - H_A / ln(3)) + (1 - H_B / ln(3))) / 2,
    "min_token_negentropy": 1 - H_A / ln(3),
    # The 10th percentile, linearly interpolated between the two positions' values (numpy's default).
    "q10_token_negentropy": (1 - H_A / ln(3)) + 0.1 * ((1 - H_B / ln(3)) - (1 - H_A / ln(3))),
    "probability_margin": ((0.5 - 0.3) + (0.9 - 0.05)) / 2,
    "min_probability": 0.5,
    "sequence_probability": math.sqrt(0.5 * 0.9),
    "mean_logprob": (ln(0.5) + ln(0.9)) / 2,
}


@pytest.mark.parametrize("scorer", list(TWO_TOKEN_EXPECTED))
def test_two_token_answer_scores_as_computed_by_hand(scorer: str) -> None:
    assert score_logprobs(TWO_TOKEN, scorer, 3) == pytest.approx(TWO_TOKEN_EXPECTED[scorer], rel=1e-12)


def test_hand_values_are_what_the_formulas_give() -> None:
    # Guard against a typo in the expectations above: 0.0628 and 0.641 by pencil and paper.
    assert TWO_TOKEN_EXPECTED["min_token_negentropy"] == pytest.approx(0.06277, abs=1e-5)
    assert 1 - H_B / ln(3) == pytest.approx(0.64100, abs=1e-5)


def test_negentropy_renormalizes_the_top_k_but_margin_uses_raw_probabilities() -> None:
    # Top-3 mass 0.7: renormalized to (4/7, 2/7, 1/7) for the entropy; the margin stays 0.4 - 0.2.
    content = [entry("A", 0.4, [0.4, 0.2, 0.1])]
    renormalized = [4 / 7, 2 / 7, 1 / 7]
    entropy = -sum(p * ln(p) for p in renormalized)
    assert score_logprobs(content, "mean_token_negentropy", 3) == pytest.approx(1 - entropy / ln(3))
    assert score_logprobs(content, "probability_margin", 3) == pytest.approx(0.2)


def test_only_the_top_k_alternatives_are_used() -> None:
    content = [entry("A", 0.5, [0.5, 0.3, 0.1, 0.05, 0.05])]
    assert scores(content, 3) == scores([entry("A", 0.5, [0.5, 0.3, 0.1])], 3)


def test_unknown_or_external_scorer_is_refused() -> None:
    for name in ("external", "entropy"):
        with pytest.raises(UnknownScorerError, match="cannot be computed"):
            score_logprobs(TWO_TOKEN, name, 3)


# --- quirks ------------------------------------------------------------------------------------


def test_position_with_fewer_than_k_alternatives_is_normalized_by_its_own_count() -> None:
    content = [*TWO_TOKEN, entry("C", 0.6, [0.6, 0.4])]
    tn_c = 1 - (-(0.6 * ln(0.6) + 0.4 * ln(0.4))) / ln(2)
    expected_mean = (2 * TWO_TOKEN_EXPECTED["mean_token_negentropy"] + tn_c) / 3
    assert score_logprobs(content, "mean_token_negentropy", 3) == pytest.approx(expected_mean)
    assert score_logprobs(content, "probability_margin", 3) == pytest.approx((0.2 + 0.85 + 0.2) / 3)


def test_position_with_one_alternative_is_skipped_by_alternative_scorers_only() -> None:
    content = [*TWO_TOKEN, entry("D", 0.7, [0.7])]
    for name in ALTERNATIVE_SCORERS:
        assert score_logprobs(content, name, 3) == pytest.approx(TWO_TOKEN_EXPECTED[name])
    assert score_logprobs(content, "mean_logprob", 3) == pytest.approx((ln(0.5) + ln(0.9) + ln(0.7)) / 3)


def test_top_k_of_one_gives_no_alternative_score_but_keeps_chosen_token_scores() -> None:
    result = scores(TWO_TOKEN, 1)
    assert all(result[name] is None for name in ALTERNATIVE_SCORERS)
    assert all(result[name] == pytest.approx(TWO_TOKEN_EXPECTED[name]) for name in CHOSEN_SCORERS)


def test_native_end_of_text_entry_does_not_change_the_score() -> None:
    content = upstream_content("native_qwen_top20.json")
    assert content[-1]["token"] == "" and content[-1]["top_logprobs"]  # the quirk is in the fixture
    assert scores(content, 20) == scores(content[:-1], 20)
    assert score_logprobs(content, "mean_logprob", 20) == pytest.approx(content[0]["logprob"])


def test_streamed_and_non_streamed_native_answers_score_the_same() -> None:
    # Same answer fetched twice from one llama.cpp server: streamed with 5 alternatives, and
    # non-streamed with 15 plus the trailing end-of-text entry the stream does not have. The
    # server computes in float32, so the two fetches' logprobs differ by up to ~5e-7.
    streamed = upstream_content("native_smol_stream.json")
    non_streamed = upstream_content("native_smol_top15.json")
    assert len(non_streamed) == len(streamed) + 1
    for s, n in zip(streamed, non_streamed, strict=False):
        assert s["token"] == n["token"] and s["logprob"] == pytest.approx(n["logprob"], abs=1e-6)
        assert [a["token"] for a in s["top_logprobs"]] == [a["token"] for a in n["top_logprobs"][:5]]
    for name in SCORERS:
        expected = score_logprobs(non_streamed, name, 5)
        assert_same(score_logprobs(streamed, name, 5), expected, tolerance=1e-6)
        # A K=15 policy scores the 5-alternative stream over what it has (ln 5), like K=5.
        assert_same(score_logprobs(streamed, name, 15), expected, tolerance=1e-6)


def test_empty_token_carrying_bytes_is_a_real_token_not_end_of_text() -> None:
    partial_utf8 = entry("", 0.5, [0.5, 0.5], bytes=[0xE2])
    assert score_logprobs([*TWO_TOKEN, partial_utf8], "mean_logprob", 3) == pytest.approx(
        (ln(0.5) + ln(0.9) + ln(0.5)) / 3
    )


def test_empty_alternative_less_entry_is_skipped_anywhere() -> None:
    blank = {"token": "", "logprob": -3.0, "top_logprobs": []}
    assert scores([TWO_TOKEN[0], blank, TWO_TOKEN[1]], 3) == scores(TWO_TOKEN, 3)


@pytest.mark.parametrize(
    "body",
    [
        {},
        {"choices": []},
        {"choices": [{"message": {"content": "hi"}}]},
        {"choices": [{"logprobs": None}]},
        {"choices": [{"logprobs": {"content": None}}]},
        {"choices": [{"logprobs": {"content": []}}]},
        {"choices": [{"logprobs": {"content": [{"token": "", "logprob": -0.1, "top_logprobs": []}]}}]},
    ],
)
def test_response_without_usable_logprobs_has_no_score(body: dict[str, Any]) -> None:
    assert all(score_response(body, name, 5) is None for name in SCORERS)


def test_null_values_are_skipped_not_errors() -> None:
    content = [
        {"token": "A", "logprob": None, "top_logprobs": None},
        {"token": "B", "logprob": ln(0.9), "top_logprobs": [{"token": "x", "logprob": None}]},
        {
            "token": "C",
            "logprob": ln(0.5),
            "top_logprobs": [
                {"token": "C", "logprob": ln(0.5)},
                {"token": "y", "logprob": None},
                {"token": "z", "logprob": ln(0.5)},
            ],
        },
    ]
    assert score_logprobs(content, "mean_logprob", 3) == pytest.approx((ln(0.9) + ln(0.5)) / 2)
    assert score_logprobs(content, "mean_token_negentropy", 3) == pytest.approx(0.0)  # (0.5, 0.5) of 2
    assert score_logprobs(content[:2], "probability_margin", 3) is None


def test_malformed_alternatives_are_ignored_not_errors() -> None:
    content = [
        TWO_TOKEN[0],
        {"token": "x", "logprob": ln(0.9), "top_logprobs": "not a list"},
        {"token": "y", "logprob": ln(0.9), "top_logprobs": {"y": -0.1, "z": -2.0}},
        {"token": "w", "logprob": "n/a", "top_logprobs": [{"token": "w"}, "junk", {"logprob": [1]}]},
        "not an entry",
        TWO_TOKEN[1],
    ]
    for name in ALTERNATIVE_SCORERS:
        assert score_logprobs(content, name, 3) == pytest.approx(TWO_TOKEN_EXPECTED[name])
    assert score_logprobs(content, "mean_logprob", 3) == pytest.approx((ln(0.5) + 3 * ln(0.9)) / 4)


def test_zero_probability_is_kept_not_dropped() -> None:
    # A -inf alternative counts (like OpenAI's -9999 floor); a -inf chosen token is probability 0.
    floor = [
        {
            "token": "A",
            "logprob": 0.0,
            "top_logprobs": [{"token": "A", "logprob": 0.0}, {"token": "b", "logprob": -9999.0}],
        }
    ]
    infinite = [
        {**floor[0], "top_logprobs": [{"token": "A", "logprob": 0.0}, {"token": "b", "logprob": -math.inf}]}
    ]
    assert scores(infinite, 2) == scores(floor, 2)
    impossible = [*TWO_TOKEN, {"token": "Z", "logprob": -math.inf, "top_logprobs": []}]
    assert score_logprobs(impossible, "min_probability", 3) == 0.0
    assert score_logprobs(impossible, "sequence_probability", 3) == 0.0


def test_legacy_completions_logprobs_score_like_content() -> None:
    legacy = {
        "tokens": ["A", "B"],
        "token_logprobs": [ln(0.5), ln(0.9)],
        "top_logprobs": [
            {"A": ln(0.5), "A1": ln(0.3), "A2": ln(0.2)},
            {"B": ln(0.9), "B1": ln(0.05), "B2": ln(0.05)},
        ],
    }
    assert scores(legacy_to_content(legacy), 3) == pytest.approx(TWO_TOKEN_EXPECTED)
    body = {"object": "text_completion", "choices": [{"text": "AB", "logprobs": legacy}]}
    assert {name: score_response(body, name, 3) for name in SCORERS} == pytest.approx(TWO_TOKEN_EXPECTED)


# --- agreement with UQLM (fixtures/uqlm_scores.json, see fixtures/README.md) --------------------

# (our input: upstream file, our K, the UQLM case whose input coincides with our reading)
UPSTREAM_AGREEMENT = [
    ("native_smol_top15.json", 15, "native_smol_top15/no_end_of_text/k15"),
    ("native_smol_top15.json", 5, "native_smol_top15/no_end_of_text_top5/k5"),
    ("native_qwen_top20.json", 20, "native_qwen_top20/no_end_of_text/k20"),
    ("native_qwen_top20.json", 15, "native_qwen_top20/no_end_of_text_top15/k15"),
    ("native_qwen_top20.json", 5, "native_qwen_top20/no_end_of_text_top5/k5"),
    ("native_gemma_top5.json", 5, "native_gemma_top5/as_served/k5"),
    ("native_smol_stream.json", 5, "native_smol_stream/as_served/k5"),
    ("llamacpp_smol_top15.json", 15, "llamacpp_smol_top15/as_served/k15"),
    ("llamacpp_qwen_stream.json", 5, "llamacpp_qwen_stream/as_served/k5"),
]
SYNTHETIC_AGREEMENT = [
    "synthetic/two_token/k3",
    "synthetic/unsorted_alternatives/k3",
    "synthetic/one_alternative_positions/k3",
    "synthetic/k1/k1",
    "synthetic/uniform/k4",
    "synthetic/near_certain_openai_floor/k3",
    "synthetic/empty/k5",
]


def test_uqlm_fixture_records_its_producer() -> None:
    assert UQLM["uqlm_version"] == "0.6.7"
    assert (FIXTURES / "README.md").read_text().count("record_uqlm_scores.py") >= 1


@pytest.mark.parametrize(("source", "top_k", "case"), UPSTREAM_AGREEMENT)
@pytest.mark.parametrize("scorer", UQLM_SCORERS)
def test_upstream_answer_as_served_matches_uqlm(source: str, top_k: int, case: str, scorer: str) -> None:
    recorded = UQLM["cases"][case]
    assert recorded["top_k"] == top_k
    assert_same(score_logprobs(upstream_content(source), scorer, top_k), recorded["uqlm"][scorer])


@pytest.mark.parametrize("case", SYNTHETIC_AGREEMENT)
@pytest.mark.parametrize("scorer", UQLM_SCORERS)
def test_synthetic_case_matches_uqlm(case: str, scorer: str) -> None:
    recorded = UQLM["cases"][case]
    assert_same(score_logprobs(recorded["content"], scorer, recorded["top_k"]), recorded["uqlm"][scorer])


def test_uqlm_agreement_summary(capsys: pytest.CaptureFixture[str]) -> None:
    """One line for docs/scorers.md: run with ``-s -k uqlm_agreement_summary`` to see it."""
    pairs = [(upstream_content(s), k, UQLM["cases"][c]) for s, k, c in UPSTREAM_AGREEMENT]
    pairs += [
        (UQLM["cases"][c]["content"], UQLM["cases"][c]["top_k"], UQLM["cases"][c])
        for c in SYNTHETIC_AGREEMENT
    ]
    deviations, missing = [], 0
    for content, top_k, recorded in pairs:
        for scorer in UQLM_SCORERS:
            ours, theirs = score_logprobs(content, scorer, top_k), recorded["uqlm"][scorer]
            if theirs is None:
                assert ours is None
                missing += 1
            else:
                deviations.append(abs(ours - theirs))
    with capsys.disabled():
        print(
            f"\nUQLM agreement: {len(deviations) + missing} comparisons ({missing} both missing), "
            f"max |ours - UQLM| = {max(deviations):.3g}"
        )
    assert max(deviations) <= 1e-12


def test_mean_logprob_is_the_log_of_uqlm_sequence_probability() -> None:
    for source, top_k, case in UPSTREAM_AGREEMENT:
        ours = score_logprobs(upstream_content(source), "mean_logprob", top_k)
        assert ours == pytest.approx(ln(UQLM["cases"][case]["uqlm"]["sequence_probability"]), abs=1e-12)


def test_uqlm_counts_the_end_of_text_entry_we_skip() -> None:
    content = upstream_content("native_smol_top15.json")
    theirs = UQLM["cases"]["native_smol_top15/as_served/k15"]["uqlm"]
    for scorer in ("mean_token_negentropy", "probability_margin", "sequence_probability"):
        assert abs(score_logprobs(content, scorer, 15) - theirs[scorer]) > 1e-3


def test_uqlm_drops_positions_without_exactly_k_alternatives() -> None:
    # A K=20 answer under a K=15 policy: UQLM has no negentropy, we take the top 15.
    theirs = UQLM["cases"]["native_qwen_top20/as_served/k15"]["uqlm"]
    assert theirs["mean_token_negentropy"] is None
    assert score_logprobs(upstream_content("native_qwen_top20.json"), "mean_token_negentropy", 15) is not None
    # A position with 2 of K=3 alternatives: UQLM ignores it, we score it over ln 2.
    fewer = UQLM["cases"]["synthetic/fewer_alternatives/k3"]
    ours = score_logprobs(fewer["content"], "mean_token_negentropy", 3)
    assert fewer["uqlm"]["mean_token_negentropy"] == pytest.approx(
        TWO_TOKEN_EXPECTED["mean_token_negentropy"]
    )
    assert abs(ours - fewer["uqlm"]["mean_token_negentropy"]) > 1e-2
    for scorer in ("probability_margin", "min_probability", "sequence_probability"):
        assert_same(score_logprobs(fewer["content"], scorer, 3), fewer["uqlm"][scorer])


# --- properties --------------------------------------------------------------------------------

logprobs = st.floats(min_value=-30.0, max_value=0.0, allow_nan=False)
positions = st.lists(logprobs, min_size=1, max_size=8).map(lambda alts: sorted(alts, reverse=True))
answers = st.lists(positions, min_size=1, max_size=12)


def content_of(alternatives: list[list[float]]) -> list[dict[str, Any]]:
    return [
        {
            "token": f"t{j}",
            "logprob": alts[0],
            "top_logprobs": [{"token": f"a{j}.{i}", "logprob": lp} for i, lp in enumerate(alts)],
        }
        for j, alts in enumerate(alternatives)
    ]


def reference_negentropies(alternatives: list[list[float]], top_k: int) -> list[float]:
    """docs/contracts.md#scorers position by position, in plain Python."""
    values = []
    for alts in alternatives:
        top = sorted(alts, reverse=True)[:top_k]
        if len(top) < 2:
            continue
        probs = [math.exp(lp - top[0]) for lp in top]
        probs = [p / sum(probs) for p in probs]
        entropy = -sum(p * math.log(p) for p in probs if p > 0)
        values.append(1 - entropy / math.log(len(top)))
    return values


@settings(max_examples=200, deadline=None)
@given(answers, st.integers(min_value=1, max_value=10))
def test_negentropies_match_the_plain_python_reference(alternatives: list[list[float]], top_k: int) -> None:
    expected = reference_negentropies(alternatives, top_k)
    mean = score_logprobs(content_of(alternatives), "mean_token_negentropy", top_k)
    minimum = score_logprobs(content_of(alternatives), "min_token_negentropy", top_k)
    if not expected:
        assert mean is None and minimum is None
    else:
        assert mean == pytest.approx(sum(expected) / len(expected), abs=1e-9)
        assert minimum == pytest.approx(min(expected), abs=1e-9)


@settings(max_examples=200, deadline=None)
@given(answers, st.integers(min_value=2, max_value=10))
def test_scores_stay_in_their_ranges(alternatives: list[list[float]], top_k: int) -> None:
    result = scores(content_of(alternatives), top_k)
    for name in ("mean_token_negentropy", "min_token_negentropy", "probability_margin"):
        assert result[name] is None or 0.0 <= result[name] <= 1.0
    if result["mean_token_negentropy"] is not None:
        assert result["min_token_negentropy"] <= result["mean_token_negentropy"] + 1e-12
    assert 0.0 <= result["min_probability"] <= result["sequence_probability"] + 1e-12 <= 1.0 + 1e-12
    assert result["mean_logprob"] <= 0.0


@settings(max_examples=200, deadline=None)
@given(answers, st.integers(min_value=1, max_value=10), st.randoms(use_true_random=False))
def test_score_ignores_the_order_of_alternatives_and_a_trailing_end_of_text_entry(
    alternatives: list[list[float]], top_k: int, rng: random.Random
) -> None:
    content = content_of(alternatives)
    shuffled = [{**e, "top_logprobs": rng.sample(e["top_logprobs"], len(e["top_logprobs"]))} for e in content]
    end_of_text = {
        "token": "",
        "bytes": [],
        "logprob": -0.2,
        "top_logprobs": [{"token": "", "logprob": -0.2}, {"token": ".", "logprob": -2.0}],
    }
    for name in SCORERS:
        expected = score_logprobs(content, name, top_k)
        assert_same(score_logprobs(shuffled, name, top_k), expected, tolerance=1e-9)
        assert_same(score_logprobs([*content, end_of_text], name, top_k), expected, tolerance=1e-9)


# --- the plain-Python path for small answers ---------------------------------------------------

ragged_logprobs = st.one_of(logprobs, st.just(-math.inf), st.just(0.0))
ragged_answers = st.lists(st.lists(ragged_logprobs, min_size=0, max_size=20), min_size=1, max_size=16)


def numpy_score(content: list[dict[str, Any]], scorer: str, top_k: int) -> float | None:
    """The numpy implementation alone (what large answers and calibration batches go through)."""
    return SCORERS[scorer](TokenLogprobs.from_content(content, top_k))


@settings(max_examples=300, deadline=None)
@given(ragged_answers, st.integers(min_value=1, max_value=20), st.randoms(use_true_random=False))
def test_small_answers_score_the_same_in_plain_python_as_with_numpy(
    alternatives: list[list[float]], top_k: int, rng: random.Random
) -> None:
    content = [
        {
            "token": rng.choice(["", "t"]),
            "logprob": alts[0] if alts else -0.5,
            "top_logprobs": [
                {"token": f"a{i}", "logprob": lp} for i, lp in enumerate(rng.sample(alts, len(alts)))
            ],
        }
        for alts in alternatives
    ]
    for name in ("mean_token_negentropy", "min_token_negentropy"):
        small = sum(map(len, alternatives)) <= 256
        assert (token_scores.plain_negentropies(content, top_k) is not None) == small  # the path taken
        assert_same(score_logprobs(content, name, top_k), numpy_score(content, name, top_k))


def test_the_served_answers_score_the_same_in_plain_python_as_with_numpy() -> None:
    for name, top_k, _ in UPSTREAM_AGREEMENT:
        content = upstream_content(name)
        for scorer in ("mean_token_negentropy", "min_token_negentropy"):
            assert_same(score_logprobs(content, scorer, top_k), numpy_score(content, scorer, top_k))


wide_logprobs = st.one_of(
    st.floats(min_value=-60.0, max_value=60.0, allow_nan=False), st.integers(min_value=-50, max_value=0)
)


@settings(max_examples=300, deadline=None)
@given(st.lists(st.lists(wide_logprobs, min_size=1, max_size=20), min_size=1, max_size=12))
def test_positions_of_at_most_k_score_the_same_in_one_pass_as_with_numpy(
    alternatives: list[list[float]],
) -> None:
    # The one-pass sums leave the position's maximum in (checked within bounds on their sum) and take
    # int logprobs as numbers: within 1e-12 of the numpy path all the same, at K = the widest row.
    content = content_of(alternatives)
    top_k = max(map(len, alternatives))
    for name in ("mean_token_negentropy", "min_token_negentropy"):
        assert_same(score_logprobs(content, name, top_k), numpy_score(content, name, top_k))
