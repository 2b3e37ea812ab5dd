"""The shift alarm's power: false alarms on in-distribution traffic and detection delay under stated
shifts, measured on the committed per-query runs (docs/operations.md#shift-alarm).

    python bench/calibration/shift_alarm.py [--seeds 4] [--requests 100000] [--trials 200] \
        [--cases arithmetic,word] [--json bench/calibration/results/shift-alarm.json]

Protocol, per tier of a served policy and per seed: the runs' queries stand for the population.
The reference is a calibration drawn from it: as many queries as the runs have, drawn with
replacement, their histograms written by ``calibration.policy.shift_reference`` as ``cascade
calibrate`` writes them (edges included); the traffic is drawn independently from the same
population (in distribution) or reweighted (a shift). So the calibration's own sampling noise is
part of every number, as it is in production, where the reference is one sample of the traffic's
population. Each request adds the cheap stage's score bin and whether the tier escalated it
(score < threshold).

* False alarms: ``--requests`` in-distribution requests per seed; after an alarm the detector is
  reset and goes on. Reported per 10,000 requests and as requests between false alarms.
* Detection delay: the window is first filled with in-distribution traffic, then the traffic
  switches to the shifted draw; the delay is the shifted requests until the alarm (``--trials``
  switches per seed, capped at ``--cap`` requests: "missed" counts the trials that never fired).

Shifts: (a) the arithmetic demo policy (``policies/local-demo.json`` on
``data/local/arithmetic-runs.jsonl.gz``, 80% one-step questions) under mixes of more multi-step
questions, or times-table products only; (b) the word-problem policy's buffered tier
(``bench/local/results/local-steps-hosted-buffer.json``) under an EMULATED shift to GSM8K-style
problems: the stream redraws the generated problems at the escalation rate and served quality
observed on real ones (37.5% escalated, 12.5% right): a row is drawn from the escalated rows with
probability 0.375 (else the accepted ones) and is one whose served answer is wrong with
probability 0.875. That moves the score distribution only as much as conditioning on wrong answers
moves it; (c) the same tier under the REAL shift: the traffic switches to the same members' runs
on GSM8K train questions (``data/local/gsm8k-train-runs.jsonl.gz``), which the calibration never
saw.

Variants: the detector's window (requests per test) and combination across signals, the signals
alone, and the score drift metric's rule (PSI above 0.25 over the same window) for comparison.
"""

from __future__ import annotations

import argparse
import json
import math
import sys
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO))

from calibration.policy.shift_reference import tier_reference  # noqa: E402
from calibration.runs import RunsMatrix, load_runs  # noqa: E402
from policies import load_policy  # noqa: E402
from policies.score_distribution import population_stability_index  # noqa: E402
from stats.shift_detector import ShiftDetector  # noqa: E402

# Escalation rate and served quality of the hosted word-problem policy's buffered tier on real
# GSM8K-style problems (the shift to emulate).
GSM8K_ESCALATION, GSM8K_QUALITY = 0.375, 0.125
# The same members' runs on GSM8K train questions (collection/data/gsm8k-train.jsonl), and the
# hosted prices the word-problem policy was calibrated at.
GSM8K_RUNS = REPO / "data/local/gsm8k-train-runs.jsonl.gz"
HOSTED_PRICES = REPO / "data/local/word-problems-hosted-prices.yaml"


@dataclass(frozen=True)
class Variant:
    """One detector setting: ``signals`` are indexes into (score bin, escalated)."""

    name: str
    window: int
    blocks: int
    alpha: float
    combine: str = "bonferroni"
    signals: tuple[int, ...] = (0, 1)
    psi: bool = False


# The first is the gateway's default (gateway.config.shift_alarm.ShiftAlarmConfig).
VARIANTS = [
    Variant("chi2 w=400 fisher", 400, 4, 1e-5, "fisher"),
    Variant("chi2 w=200 fisher", 200, 4, 1e-5, "fisher"),
    Variant("chi2 w=800 fisher", 800, 4, 1e-5, "fisher"),
    Variant("chi2 w=400 fisher alpha=1e-3", 400, 4, 1e-3, "fisher"),
    Variant("chi2 w=400 bonferroni", 400, 4, 1e-5),
    Variant("chi2 w=400 score only", 400, 4, 1e-5, signals=(0,)),
    Variant("chi2 w=400 escalation only", 400, 4, 1e-5, signals=(1,)),
    Variant("PSI>0.25 w=400 (drift rule)", 400, 4, 0.25, psi=True),
]


@dataclass
class Case:
    """One tier's rows and the shifts to measure on it."""

    name: str
    scores: np.ndarray  # the cheap stage's score per row
    threshold: float
    quality: np.ndarray  # (rows, 2): cheap, strong correct
    cost: np.ndarray  # (rows, 2): cheap, strong USD
    shifts: dict[str, np.ndarray]  # shift name -> draw weight per row
    routes: list[object]
    population: np.ndarray | None = None  # the in-distribution rows (None: every row)

    def rows(self) -> np.ndarray:
        """The in-distribution rows: the calibration's population and the unshifted traffic's."""
        return np.arange(self.scores.size) if self.population is None else self.population


class _PsiDetector(ShiftDetector):
    """The drift metric's rule over a count window: PSI of the window's score bins above ``limit``."""

    __slots__ = ("_limit", "_shares")

    def __init__(self, counts: Sequence[float], window: int, blocks: int, limit: float):
        super().__init__([counts], window, blocks, 0.5)
        total = float(sum(counts))
        self._shares = [c / total for c in counts]
        self._limit = limit

    def shifted(self) -> bool:
        """PSI of the window's score bins against the reference's shares above the limit."""
        return population_stability_index(self.totals[0], self._shares) > self._limit


def detector(variant: Variant, reference: dict) -> Callable[[], object]:
    """A factory of fresh detectors of ``variant`` against ``reference`` (a tier's shift reference)."""
    histograms = [reference["score"]["counts"], reference["escalation"]]
    chosen = [histograms[i] for i in variant.signals]
    if variant.psi:
        return lambda: _PsiDetector(histograms[0], variant.window, variant.blocks, variant.alpha)
    return lambda: ShiftDetector(chosen, variant.window, variant.blocks, variant.alpha, variant.combine)  # type: ignore[arg-type]


def request_bins(case: Case, reference: dict, variant: Variant) -> np.ndarray:
    """(rows, signals) bin indexes of every row: its score bin and whether it escalates."""
    edges = np.asarray(reference["score"]["edges"])
    score_bin = np.searchsorted(edges, case.scores, side="right")
    escalated = (case.scores < case.threshold).astype(int)
    columns = [score_bin, escalated]
    if variant.psi:
        return np.stack([score_bin], axis=1)
    return np.stack([columns[i] for i in variant.signals], axis=1)


def false_alarms(make: Callable[[], object], bins: np.ndarray, rows: np.ndarray, n: int, rng) -> int:
    """Alarms over ``n`` in-distribution requests drawn from ``rows`` (reset after each)."""
    alarm = make()
    fired = 0
    for row in rng.choice(rows, size=n):
        if alarm.observe(bins[row]):  # type: ignore[attr-defined]
            fired += 1
            alarm.reset()  # type: ignore[attr-defined]
    return fired


def delays(make, bins, rows, weights, window: int, trials: int, cap: int, rng) -> list[float]:
    """Shifted requests until the alarm, per trial (``inf`` when none within ``cap``); the window is
    first filled with in-distribution traffic from ``rows`` (an alarm during the fill resets it),
    then requests are drawn from ``rows`` with ``weights``."""
    out: list[float] = []
    shifted = np.flatnonzero(weights > 0)
    p = weights[shifted] / weights[shifted].sum()
    for _ in range(trials):
        alarm = make()
        for row in rng.choice(rows, size=window):
            if alarm.observe(bins[row]):  # type: ignore[attr-defined]
                alarm.reset()  # type: ignore[attr-defined]
        delay = math.inf
        for i, row in enumerate(rng.choice(shifted, size=cap, p=p)):
            if alarm.observe(bins[row]):  # type: ignore[attr-defined]
                delay = float(i + 1)
                break
        out.append(delay)
    return out


def shifted_outcome(case: Case, weights: np.ndarray) -> dict[str, float]:
    """Per request under a shift: the tier's cost and served quality, and the strong model alone's."""
    p = weights / weights.sum()
    escalated = case.scores < case.threshold
    tier_cost = case.cost[:, 0] + escalated * case.cost[:, 1]
    tier_quality = np.where(escalated, case.quality[:, 1], case.quality[:, 0])
    return {
        "escalation_rate": float(p @ escalated),
        "tier_cost_usd": float(p @ tier_cost),
        "tier_quality": float(p @ tier_quality),
        "strong_cost_usd": float(p @ case.cost[:, 1]),
        "strong_quality": float(p @ case.quality[:, 1]),
    }


def _subjects(path: Path) -> dict[str, str]:
    """query_id -> subject (the arithmetic template) of a runs file."""
    import gzip

    out: dict[str, str] = {}
    with gzip.open(path, "rt", encoding="utf-8") as lines:
        for line in lines:
            row = json.loads(line)
            out[row["query_id"]] = row.get("subject", "")
    return out


def _case(name: str, matrix: RunsMatrix, route, shifts: dict[str, np.ndarray]) -> Case:
    cheap, strong = (matrix.model_index(m) for m in route.models)
    return Case(
        name,
        matrix.score[:, cheap],
        route.thresholds[0],
        matrix.quality[:, [cheap, strong]],
        matrix.cost[:, [cheap, strong]],
        shifts,
        [route],
    )


def arithmetic_cases() -> list[Case]:
    """The arithmetic demo policy's cascade tiers under mix shifts (shift (a))."""
    runs = REPO / "data/local/arithmetic-runs.jsonl.gz"
    policy = load_policy(REPO / "policies/local-demo.json")
    matrix = load_runs(runs, scorer=policy.scorer.name, top_k=policy.scorer.top_k)
    subjects = _subjects(runs)
    subject = np.array([subjects[q] for q in matrix.query_ids])
    quick = np.char.startswith(subject.astype(str), "quick_")

    # Calibration: 80% one-step. A weight per row that gives the stated one-step share.
    def mix(share: float) -> np.ndarray:
        return np.where(quick, share / quick.mean(), (1 - share) / (1 - quick.mean()))

    shifts = {
        "(a) one-step 80% -> 60%": mix(0.6),
        "(a) one-step 80% -> 50%": mix(0.5),
        "(a) one-step 80% -> 0% (multi-step only)": mix(0.0),
        "(a) products only (quick_product, two_products)": np.isin(
            subject, ["quick_product", "two_products"]
        ).astype(float),
    }
    return [
        _case(f"arithmetic {tier}", matrix, policy.tiers[tier].routes[0], shifts)
        for tier in ("economy", "balanced")
    ]


def word_problem_case() -> Case:
    """The hosted word-problem policy's buffered balanced tier under the emulated GSM8K shift (b)."""
    policy = load_policy(REPO / "bench/local/results/local-steps-hosted-buffer.json")
    matrix = load_runs(
        REPO / "data/local/word-problems-runs.jsonl.gz",
        prices=HOSTED_PRICES,
        scorer=policy.scorer.name,
        top_k=policy.scorer.top_k,
    )
    route = policy.tiers["balanced"].routes[0]
    case = _case("word problems balanced (buffered)", matrix, route, {})
    escalated = case.scores < case.threshold
    served_right = np.where(escalated, case.quality[:, 1], case.quality[:, 0]) > 0.5
    weights = np.zeros(matrix.n_queries)
    for group, share in ((escalated, GSM8K_ESCALATION), (~escalated, 1 - GSM8K_ESCALATION)):
        for right, part in ((served_right, GSM8K_QUALITY), (~served_right, 1 - GSM8K_QUALITY)):
            members = group & right
            weights[members] = share * part / max(1, members.sum())
    case.shifts["(b) GSM8K-style, emulated (37.5% escalated, 12.5% right)"] = weights
    hardest = (case.quality[:, 0] < 0.5) & (case.quality[:, 1] < 0.5)
    case.shifts["(b') hardest generated problems (both models wrong)"] = hardest.astype(float)
    return with_gsm8k_rows(case, policy.scorer.name, policy.scorer.top_k)


def with_gsm8k_rows(case: Case, scorer: str, top_k: int) -> Case:
    """``case`` with the GSM8K train questions' runs appended as the shift (c): real problems the
    calibration never saw, answered by the same two members (``GSM8K_RUNS``); the generated rows
    stay the in-distribution population."""
    matrix = load_runs(GSM8K_RUNS, prices=HOSTED_PRICES, scorer=scorer, top_k=top_k)
    real = _case("", matrix, case.routes[0], {})
    generated = case.scores.size
    shifts = {name: np.r_[weights, np.zeros(real.scores.size)] for name, weights in case.shifts.items()}
    shifts[f"(c) GSM8K train questions, real runs ({real.scores.size})"] = np.r_[
        np.zeros(generated), np.ones(real.scores.size)
    ]
    return Case(
        case.name,
        np.r_[case.scores, real.scores],
        case.threshold,
        np.vstack([case.quality, real.quality]),
        np.vstack([case.cost, real.cost]),
        shifts,
        case.routes,
        np.arange(generated) if case.population is None else case.population,
    )


def measure(case: Case, variant: Variant, args: argparse.Namespace) -> dict[str, object]:
    """One variant on one case: false alarms and the delay per shift, over ``args.seeds`` calibrations."""
    alarms, requests = 0, 0
    found: dict[str, list[float]] = {name: [] for name in case.shifts}
    for seed in range(args.seeds):
        rng = np.random.default_rng(seed)
        stream_rows = case.rows()
        reference_rows = rng.choice(stream_rows, size=stream_rows.size)
        sub = _subset(case, reference_rows)
        reference = tier_reference(sub, case.routes)  # type: ignore[arg-type]
        assert reference is not None
        make = detector(variant, reference)
        bins = request_bins(case, reference, variant)
        alarms += false_alarms(make, bins, stream_rows, args.requests, rng)
        requests += args.requests
        for name, weights in case.shifts.items():
            found[name] += delays(
                make, bins, stream_rows, weights, variant.window, args.trials, args.cap, rng
            )
    result: dict[str, object] = {
        "false_alarms": alarms,
        "requests": requests,
        "per_10k": alarms / requests * 10_000,
    }
    result["delays"] = {name: _summary(values) for name, values in found.items()}
    return result


def _subset(case: Case, rows: np.ndarray) -> RunsMatrix:
    """A one-model runs matrix of ``rows`` (what ``tier_reference`` reads: the cheap stage's scores)."""
    model = case.routes[0].models[0]  # type: ignore[attr-defined]
    score = case.scores[rows][:, None]
    n = rows.size
    return RunsMatrix(
        models=(model,),
        query_ids=np.arange(n).astype(str),
        quality=np.zeros((n, 1)),
        cost=np.zeros((n, 1)),
        score=score,
    )


def _summary(values: list[float]) -> dict[str, float]:
    """Trials, missed (no alarm within the cap), and the delay's median and 90th percentile (inf:
    beyond the cap)."""
    delays = np.array(values)
    missed = int(np.sum(~np.isfinite(delays)))
    ranked = np.sort(delays)  # inf last: a percentile that falls on a missed trial is inf
    return {
        "trials": len(values),
        "missed": missed,
        "median": float(ranked[int(0.5 * (len(ranked) - 1))]) if values else math.nan,
        "p90": float(ranked[math.ceil(0.9 * (len(ranked) - 1))]) if values else math.nan,
    }


def _cell(summary: dict[str, float]) -> str:
    if summary["missed"] == summary["trials"]:
        return "never"
    text = f"{summary['median']:.0f} / {summary['p90']:.0f}".replace("inf", "-")
    return text + (f" ({summary['missed']} missed)" if summary["missed"] else "")


def print_tables(results: dict[str, dict[str, dict[str, object]]], cases: list[Case]) -> None:
    """One markdown table per case: false alarms and delays (median / p90 shifted requests)."""
    for case in cases:
        shifts = list(case.shifts)
        print(f"\n{case.name}\n")
        print("| detector | false alarms per 10k | " + " | ".join(shifts) + " |")
        print("|---|---|" + "---|" * len(shifts))
        for variant, result in results[case.name].items():
            delays = result["delays"]
            assert isinstance(delays, dict)
            cells = " | ".join(_cell(delays[s]) for s in shifts)
            print(f"| {variant} | {result['per_10k']:.3f} ({result['false_alarms']}) | {cells} |")
        print(
            "\n| shift | escalation | tier cost | tier quality | strong alone cost | strong alone quality |"
        )
        print("|---|---|---|---|---|---|")
        unshifted = np.zeros(case.scores.size)
        unshifted[case.rows()] = 1.0
        for name, weights in {"none": unshifted, **case.shifts}.items():
            o = shifted_outcome(case, weights)
            print(
                f"| {name} | {o['escalation_rate']:.3f} | ${o['tier_cost_usd']:.3g} "
                f"| {o['tier_quality']:.3f} | ${o['strong_cost_usd']:.3g} | {o['strong_quality']:.3f} |"
            )


def main(argv: list[str] | None = None) -> None:
    """Measure every variant on every case and print the tables (and write ``--json``)."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seeds", type=int, default=4, help="calibrations drawn per case")
    parser.add_argument("--requests", type=int, default=100_000, help="in-distribution requests per seed")
    parser.add_argument("--trials", type=int, default=50, help="shift switches per seed and shift")
    parser.add_argument(
        "--cap", type=int, default=10_000, help="shifted requests before a trial counts missed"
    )
    parser.add_argument("--variants", default="", help="comma-separated variant names (default: all)")
    parser.add_argument(
        "--cases", default="arithmetic,word", help="which policies: arithmetic, word (default: both)"
    )
    parser.add_argument("--json", type=Path, default=None)
    args = parser.parse_args(argv)
    wanted = {v.strip() for v in args.variants.split(",") if v.strip()}
    variants = [v for v in VARIANTS if not wanted or v.name in wanted]
    chosen = {c.strip() for c in args.cases.split(",")}
    cases = [
        *(arithmetic_cases() if "arithmetic" in chosen else []),
        *([word_problem_case()] if "word" in chosen else []),
    ]
    started = time.perf_counter()
    results: dict[str, dict[str, dict[str, object]]] = {}
    for case in cases:
        results[case.name] = {v.name: measure(case, v, args) for v in variants}
        print(f"{case.name}: done after {time.perf_counter() - started:.0f} s", file=sys.stderr)
    print_tables(results, cases)
    if args.json is not None:
        args.json.parent.mkdir(parents=True, exist_ok=True)
        settings = {k: v for k, v in vars(args).items() if k != "json"}
        args.json.write_text(json.dumps({"settings": settings, "results": results}, indent=1) + "\n")


if __name__ == "__main__":
    main()
