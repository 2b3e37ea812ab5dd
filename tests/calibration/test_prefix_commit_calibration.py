"""Calibrating a prefix commit rule: prefix scores, the cancelled stage's charge, frontiers and the choice."""

from __future__ import annotations

import gzip
import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from hypothesis.extra.numpy import arrays

from calibration.evaluation.chains import chain_outcomes
from calibration.frontier import chain_per_query, pair_frontier
from calibration.heldout_expected import HeldoutSettings
from calibration.policy.commit_choice import keeps_gain, parse_grid, study_commit_rules
from calibration.prefix_cost import cancelled_charge
from calibration.runs import RunsError, RunsMatrix, load_runs
from calibration.tiers import TierObjective, TiersSpec
from calibration.ttft import Timing, read_lengths, route_first_token
from money import Price
from money.charges import SENT_FIELDS_BYTES, Attempt, CallLimits, attempt_charge
from policies.commit import CommitRule
from policies.scorers import score_logprobs

PRICE = {"input_per_mtok": 0.001, "output_per_mtok": 0.2}  # prompts nearly free: the test is about tokens
STRONG = {"input_per_mtok": 0.15, "output_per_mtok": 0.6}
OVERRUN = 4  # tokens the cheap model declares it may generate after a cancel (the price sheet's)


@settings(max_examples=150, deadline=None)
@given(
    st.integers(1, 20).flatmap(
        lambda n: st.tuples(
            *[
                arrays(np.float64, n, elements=e)
                for e in (
                    st.sampled_from([0.0, 0.2, 0.5, 0.9]),
                    st.floats(0, 5),
                    st.sampled_from([0.0, 1.0]),
                    st.floats(0, 5),
                    st.sampled_from([0.0, 1.0]),
                    st.floats(-2, 3),
                )
            ]
        )
    )
)
def test_an_escalated_query_pays_the_strong_call_less_the_cheap_stage_saving(
    data: tuple[np.ndarray, ...],
) -> None:
    score, cost_l, quality_l, cost_h, quality_h, saving = data
    curve = pair_frontier(score, cost_l, quality_l, cost_h, quality_h, saving_l=saving)
    for tau, cost, quality in zip(curve.thresholds, curve.cost, curve.quality, strict=True):
        escalate = score < tau
        assert cost == pytest.approx(np.mean(cost_l + np.where(escalate, cost_h - saving, 0.0)), abs=1e-9)
        assert quality == pytest.approx(np.mean(np.where(escalate, quality_h, quality_l)), abs=1e-12)


def test_the_vectorized_chain_refunds_each_escalating_stage_as_the_reference_does() -> None:
    rng = np.random.default_rng(3)
    n, k = 40, 3
    score, cost, quality = rng.random((n, k)), rng.random((n, k)), rng.integers(0, 2, (n, k)).astype(float)
    saving = rng.random((n, k)) - 0.3
    thresholds = rng.random((7, k - 1))
    mean_cost, mean_quality, _ = chain_outcomes(score, cost, quality, thresholds, saving=saving)
    for index, row in enumerate(thresholds):
        per_cost, per_quality, _ = chain_per_query(score, cost, quality, tuple(row), saving=saving)
        assert mean_cost[index] == pytest.approx(per_cost.mean())
        assert mean_quality[index] == pytest.approx(per_quality.mean())


def test_a_cancelled_stage_is_charged_what_the_gateway_charges_the_stream_it_closed() -> None:
    price = Price(**PRICE)
    body = {
        "model": "m",
        "messages": [{"role": "user", "content": "x" * 300}],
        "stream": True,
        "max_tokens": 320,
    }
    sent = json.dumps(body).encode()
    for overrun in (None, 0, 8, 400):
        limits = CallLimits(default_cap=4096, cancel_overrun_tokens=overrun)
        expected = attempt_charge(price, Attempt(sent, streamed_tokens=16, cancelled=True), limits).usd
        assert cancelled_charge(price, len(sent), 16, 320, overrun) == pytest.approx(expected)
    # The prompt at one token per byte; the completion at the chunks read plus the declared overrun,
    # within the cap sent; undeclared, the cap (the stream's worst case).
    assert cancelled_charge(price, len(sent), 16, 320, 8) == pytest.approx(price.cost_usd(len(sent), 24))
    assert cancelled_charge(price, len(sent), 16, 320, 400) == pytest.approx(price.cost_usd(len(sent), 320))
    assert cancelled_charge(price, len(sent), 16, 320, None) == pytest.approx(price.cost_usd(len(sent), 320))


def _entry(token: str, p: float) -> dict[str, object]:
    rest = (1 - p) / 2
    alts = [
        {"token": token, "logprob": float(np.log(p))},
        {"token": "a", "logprob": float(np.log(rest))},
        {"token": "b", "logprob": float(np.log(rest))},
    ]
    return {"token": token, "logprob": float(np.log(p)), "top_logprobs": alts}


def _answer(first: float, last: float, length: int) -> list[dict[str, object]]:
    """``length`` tokens: the first 8 at probability ``first``, the rest at ``last``, a newline at 5."""
    return [_entry("\n" if i == 5 else f"t{i}", first if i < 8 else last) for i in range(length)]


def _write_runs(path: Path, early_signal: bool, n: int = 80) -> None:
    """A cheap model of 40-token answers, half wrong, and a strong one always right. With
    ``early_signal`` a wrong cheap answer is unsure from its first token; else only after token 8."""
    rng = np.random.default_rng(7)
    rows = []
    for index in range(n):
        wrong = index % 2 == 1
        unsure = 0.3 if wrong else 0.95
        first, last = (unsure, 0.95) if early_signal else (float(rng.uniform(0.5, 0.99)), unsure)
        rows.append(
            {
                "query_id": f"q{index}",
                "model": "cheap",
                "correct": 0 if wrong else 1,
                "prompt_tokens": 50,
                "completion_tokens": 40,
                "request_bytes": 400,
                "completion_cap": 64,
                "latency_ms": 200 + 40 * 20,
                "logprobs": _answer(first, last, 40),
            }
        )
        rows.append(
            {
                "query_id": f"q{index}",
                "model": "strong",
                "correct": 1,
                "prompt_tokens": 50,
                "completion_tokens": 60,
                "request_bytes": 400,
                "completion_cap": 64,
                "latency_ms": 500 + 60 * 50,
                "logprobs": _answer(0.99, 0.99, 60),
            }
        )
    with gzip.open(path, "wt") as out:
        out.writelines(json.dumps(row) + "\n" for row in rows)


def _rewrite(runs: Path, change: Callable[[list[dict[str, Any]]], None]) -> None:
    """Rewrite a runs file with ``change`` applied to its rows (in place)."""
    with gzip.open(runs, "rt") as lines:
        rows = [json.loads(line) for line in lines]
    change(rows)
    with gzip.open(runs, "wt") as out:
        out.writelines(json.dumps(row) + "\n" for row in rows)


def _dropping(column: str) -> Callable[[list[dict[str, Any]]], None]:
    def drop(rows: list[dict[str, Any]]) -> None:
        for row in rows:
            del row[column]

    return drop


def _four_changed_queries(path: Path, change: Callable[[list[dict[str, Any]]], None]) -> Path:
    """Runs of four queries (the cheap answers unsure from their first token when wrong) at
    ``path``, with ``change`` applied to their rows."""
    _write_runs(path, early_signal=True, n=4)
    _rewrite(path, change)
    return path


def _load_on_an_8_token_prefix(runs: Path, prices: Path) -> RunsMatrix:
    """The runs scored by min_probability (top 3) on each answer's first 8 tokens."""
    rule = CommitRule(rule="prefix", tokens=8)
    return load_runs(runs, prices=prices, scorer="min_probability", top_k=3, commit=rule)


@pytest.fixture
def prices(tmp_path: Path) -> Path:
    path = tmp_path / "prices.yaml"
    cheap = {**PRICE, "cancel_overrun_tokens": OVERRUN}
    path.write_text(f"models:\n  cheap: {json.dumps(cheap)}\n  strong: {json.dumps(STRONG)}\n")
    return path


def test_prefix_scores_read_the_first_tokens_and_escalation_refunds_the_rest(
    tmp_path: Path, prices: Path
) -> None:
    runs = tmp_path / "runs.jsonl.gz"
    _write_runs(runs, early_signal=False)
    rule = CommitRule(rule="prefix", tokens=8)
    matrix = load_runs(runs, prices=prices, scorer="min_probability", top_k=3, commit=rule)
    whole = load_runs(runs, prices=prices, scorer="min_probability", top_k=3)
    cheap = matrix.model_index("cheap")
    with gzip.open(runs, "rt") as lines:
        wrong = [json.loads(line) for line in lines][2]  # q1's cheap answer: sure for 8 tokens, then not
    assert matrix.score[1, cheap] == pytest.approx(
        score_logprobs(wrong["logprobs"][:8], "min_probability", 3)
    )
    assert matrix.score[1, cheap] >= 0.5
    assert whole.score[1, cheap] == pytest.approx(0.3)
    # Every cheap answer goes on past 8 tokens: escalating it saves its whole cost less the cancelled charge.
    charged = cancelled_charge(Price(**PRICE), 400 + SENT_FIELDS_BYTES, 8, 64, OVERRUN)
    assert matrix.escalation_saving is not None
    assert matrix.escalation_saving[:, cheap] == pytest.approx(matrix.cost[:, cheap] - charged)
    # A prefix longer than the answers reads them whole: nothing is cancelled, nothing saved.
    long_rule = load_runs(
        runs, prices=prices, scorer="min_probability", top_k=3, commit=CommitRule(rule="prefix", tokens=64)
    )
    assert long_rule.escalation_saving is not None and not long_rule.escalation_saving.any()
    with pytest.raises(RunsError, match="--prices"):
        load_runs(runs, scorer="min_probability", top_k=3, commit=rule)


def _study(runs: Path, prices: Path) -> dict[str, str]:
    spec = TiersSpec(default_tier="mid", tiers={"mid": TierObjective(max_cost_usd=3.2e-5)})

    def load(rule: CommitRule | None):  # type: ignore[no-untyped-def]
        return load_runs(runs, prices=prices, scorer="min_probability", top_k=3, commit=rule)

    study = study_commit_rules(
        load,
        spec,
        HeldoutSettings(splits=6),
        parse_grid("8,line"),
        lambda m: read_lengths(runs, m.query_ids, m.models),
    )
    return {tier: result.label for tier, result in study.chosen.items()}


def test_a_tier_gets_the_prefix_rule_where_the_first_tokens_carry_the_signal(
    tmp_path: Path, prices: Path
) -> None:
    runs = tmp_path / "early.jsonl.gz"
    _write_runs(runs, early_signal=True)
    assert _study(runs, prices) == {"mid": "prefix-line-64"}  # the first line ends at token 6: soonest


def test_a_tier_keeps_buffering_where_only_the_whole_answer_tells(tmp_path: Path, prices: Path) -> None:
    runs = tmp_path / "late.jsonl.gz"
    _write_runs(runs, early_signal=False)
    assert _study(runs, prices) == {"mid": "buffer"}


@pytest.mark.parametrize(
    ("gain", "buffered", "keeps"),
    [
        (0.8, 1.0, True),  # 80% of a positive gain
        (0.79, 1.0, False),
        (1.5, 1.0, True),
        (0.1, -0.2, True),  # no buffered gain to lose: any rule no worse qualifies
        (-0.2, -0.2, True),
        (-0.3, -0.2, False),
        (0.0, 0.0, True),
        (float("nan"), 1.0, False),
        (0.5, float("nan"), False),
    ],
)
def test_a_prefix_rule_keeps_the_gain_when_it_keeps_its_share_or_there_is_none_to_lose(
    gain: float, buffered: float, keeps: bool
) -> None:
    assert keeps_gain(gain, buffered, 0.8) is keeps


def test_a_committed_stage_starts_at_its_prefix_an_escalated_one_after_it_and_the_strong_token() -> None:
    timings = [Timing(0.2, 0.02), Timing(0.5, 0.05)]
    score = np.array([[0.9, 1.0], [0.1, 1.0]])
    whole = np.array([[40.0, 60.0], [40.0, 60.0]])
    prefix = np.array([[8.0, 60.0], [8.0, 60.0]])
    buffered, escalated = route_first_token(score, (0.5,), whole, timings)
    assert escalated.tolist() == [False, True]
    assert buffered == pytest.approx([0.2 + 0.8, 0.2 + 0.8 + 0.55])
    early, _ = route_first_token(score, (0.5,), prefix, timings)
    assert early == pytest.approx([0.2 + 0.16, 0.2 + 0.16 + 0.55])


def test_calibrate_writes_the_chosen_commit_into_the_tier_and_the_study_beside_the_report(
    tmp_path: Path, prices: Path
) -> None:
    from calibrate_command import calibrate_with_tiers

    from policies.store import load_policy

    runs = tmp_path / "early.jsonl.gz"
    _write_runs(runs, early_signal=True)
    result = calibrate_with_tiers(
        tmp_path,
        "default_tier: mid\ntiers:\n  mid: {max_cost_usd: 0.000032}\n  low: {max_cost_usd: 0.000008}\n",
        runs,
        "--prices",
        prices,
        "--scorer",
        "min_probability",
        "--top-k",
        "3",
        "--heldout-splits",
        "6",
        "--commit-grid",
        "8,line",
        "--report",
        tmp_path / "report",
    )
    assert result.exit_code == 0, result.output
    policy = load_policy(tmp_path / "policy.json")
    assert policy.tiers["mid"].commit is not None
    assert policy.tiers["mid"].commit.document() == {"rule": "prefix", "tokens": 64, "boundary": "line"}
    assert policy.tiers["low"].commit is None  # the cheap model alone: nothing to decide
    # The shift alarm's reference of the prefix tier is its rule's: its escalations are the tier's.
    reference = policy.shift_reference
    assert reference is not None and set(reference.tiers) == {"mid"}
    escalation = reference.tiers["mid"].escalation
    assert escalation[1] / sum(escalation) == pytest.approx(policy.tiers["mid"].expected.escalation_rate)
    table = (tmp_path / "report" / "commit.md").read_text()
    assert "| mid | prefix-line-64 |" in table and "| mid | buffer |" in table


def test_a_prefix_rule_cannot_know_an_answer_will_be_cut_and_is_scored_on_its_prefix(
    tmp_path: Path, prices: Path
) -> None:

    def cut_first(rows: list[dict[str, Any]]) -> None:
        rows[0]["truncated"] = True  # q0's cheap answer (sure, right) was cut at the cap

    runs = _four_changed_queries(tmp_path / "cut.jsonl.gz", cut_first)
    buffered = load_runs(runs, prices=prices, scorer="min_probability", top_k=3)
    prefix = _load_on_an_8_token_prefix(runs, prices)
    cheap = buffered.model_index("cheap")
    assert buffered.score[0, cheap] == -np.inf  # read whole: the gateway sees the cut and escalates
    assert prefix.score[0, cheap] == pytest.approx(0.95)  # decided on 8 tokens, before the cut


def test_runs_without_request_bytes_bound_the_prompt_from_its_tokens_and_say_so(
    tmp_path: Path, prices: Path
) -> None:
    runs = _four_changed_queries(tmp_path / "old.jsonl.gz", _dropping("request_bytes"))
    matrix = _load_on_an_8_token_prefix(runs, prices)
    cheap = matrix.model_index("cheap")
    charged = cancelled_charge(Price(**PRICE), 50 * 4 + SENT_FIELDS_BYTES, 8, 64, OVERRUN)
    assert matrix.escalation_saving is not None
    assert matrix.escalation_saving[:, cheap] == pytest.approx(matrix.cost[:, cheap] - charged)
    assert any("request_bytes" in note for note in matrix.notes)


def test_runs_without_the_cap_sent_cannot_charge_a_cancelled_stage_and_say_which_column(
    tmp_path: Path, prices: Path
) -> None:
    runs = _four_changed_queries(tmp_path / "capless.jsonl.gz", _dropping("completion_cap"))
    with pytest.raises(RunsError, match="completion_cap"):
        _load_on_an_8_token_prefix(runs, prices)
