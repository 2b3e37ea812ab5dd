"""Choose each tier's commit rule held out: ``buffer``, or ``prefix`` with the k that keeps the gain.

For the buffered rule and every prefix rule of the grid (``parse_grid``: token counts, and ``line``,
the end of the first line), the runs are loaded under that rule (scores of the prefix, a cancelled
cheap stage charged as the gateway charges it: ``calibration.runs.load_runs(commit=...)``) and
calibrated as ``cascade calibrate`` does: the same tiers, the same held-out protocol (the splits of
``cascade evaluate``). Per tier and rule:

* **normalized gain** held out: the tier's held-out mean quality above the straight line from the
  cheapest model to the best one, at the tier's held-out mean cost, as a share of the two models'
  quality difference (both endpoints full-data, whole answers: a single model is never cancelled).
  0: no better than sending a random share of the queries to the best model at the same cost.
* **share**: that gain as a share of the buffered rule's gain for the tier.

A tier gets ``prefix`` only where some prefix rule keeps at least ``MIN_GAIN_SHARE`` of the buffered
gain (``keeps_gain``); where the buffered rule has no gain (<= 0) there is none to lose, and a prefix
rule qualifies when its gain is no lower. Of the qualifying rules, the one that starts accepted
streams soonest (estimated, ``calibration.ttft``), then the larger gain. Why 80%: the prefix rule is worth
having for its first token, which it moves from the end of the cheap answer to its k-th token (the
task's answers are 80+ tokens, so k <= 32 is a 3x or larger cut); giving up a fifth of the cascade's
quality gain over random routing for that is the trade a streamed chat makes, and more than a fifth
would leave the tier nearer to random routing than to its calibrated cascade. The threshold is an
option (``--min-gain-share``) for deployments that weigh it otherwise.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from calibration.bounds import BoundSettings
from calibration.diagnostics import model_auroc
from calibration.heldout_expected import HeldoutSettings
from calibration.policy.calibrate import Calibrated, calibrate
from calibration.runs import RunsMatrix
from calibration.tiers import TiersSpec
from calibration.ttft import Timing, prefix_tokens, route_first_token
from policies.commit import CommitRule

MIN_GAIN_SHARE = 0.8
# The prefix of ``line``: the end of the first line, or this many tokens if that comes first.
LINE_TOKENS = 64


def parse_grid(text: str) -> list[CommitRule]:
    """``"8,16,32,64,line"`` -> the prefix rules (``line``: ``boundary: line`` within ``LINE_TOKENS``,
    or ``line:N`` within N). ValueError on anything else."""
    rules: list[CommitRule] = []
    for item in (part.strip() for part in text.split(",")):
        if not item:
            continue
        if item == "line" or item.startswith("line:"):
            tokens = int(item.partition(":")[2] or LINE_TOKENS)
            rules.append(CommitRule(rule="prefix", tokens=tokens, boundary="line"))
        elif item.isdigit() and int(item) > 0:
            rules.append(CommitRule(rule="prefix", tokens=int(item)))
        else:
            raise ValueError(f"--commit-grid takes token counts and 'line', got {item!r}")
    if not rules:
        raise ValueError("--commit-grid names no prefix rule")
    return rules


def rule_label(rule: CommitRule | None) -> str:
    """``buffer``, ``prefix-32`` or ``prefix-line-64``."""
    if rule is None or rule.rule == "buffer":
        return "buffer"
    return f"prefix-line-{rule.tokens}" if rule.boundary == "line" else f"prefix-{rule.tokens}"


@dataclass(frozen=True)
class FirstToken:
    """Estimated seconds to the first token of one tier under one rule (p50, p95; None: no query)."""

    accepted: tuple[float, float] | None
    escalated: tuple[float, float] | None
    cheap_alone: float
    decided_tokens: float  # mean tokens the cheap stage generates before the decision


@dataclass(frozen=True)
class RuleResult:
    """One commit rule's calibration: full data (for the policy) and held out (per tier)."""

    rule: CommitRule | None
    calibrated: Calibrated
    gain: dict[str, float]
    first_token: dict[str, FirstToken]
    # Per model: how its score separates right from wrong answers under this rule.
    auroc: dict[str, float] = field(default_factory=dict)

    @property
    def label(self) -> str:
        """The rule's name in reports."""
        return rule_label(self.rule)

    def heldout(self, tier: str) -> Mapping[str, Any]:
        """The tier's held-out document (``policies.schema.HeldOut`` fields)."""
        assert self.calibrated.heldout is not None
        return self.calibrated.heldout[tier]


@dataclass(frozen=True)
class CommitStudy:
    """Every rule's results (the buffered rule first) and each tier's choice."""

    results: list[RuleResult]
    chosen: dict[str, RuleResult]
    min_share: float
    endpoints: tuple[tuple[float, float], tuple[float, float]]
    notes: list[str] = field(default_factory=list)

    def share(self, tier: str, result: RuleResult) -> float | None:
        """``result``'s held-out gain for ``tier`` over the buffered rule's (None: no gain to keep)."""
        base = self.results[0].gain[tier]
        return result.gain[tier] / base if base > 0 else None


def tier_gain(cost: float, quality: float, low: tuple[float, float], best: tuple[float, float]) -> float:
    """Quality above the cheapest-to-best line at ``cost``, over the two models' quality difference."""
    (c_low, q_low), (c_best, q_best) = low, best
    if not q_best > q_low:
        return float("nan")
    line = q_low + (q_best - q_low) * min(max((cost - c_low) / (c_best - c_low), 0.0), 1.0)
    return (quality - line) / (q_best - q_low)


def study_commit_rules(
    load: Callable[[CommitRule | None], RunsMatrix],
    spec: TiersSpec,
    settings: HeldoutSettings,
    rules: list[CommitRule],
    read: Callable[[RunsMatrix], tuple[np.ndarray, dict[str, Timing], np.ndarray]],
    *,
    min_share: float = MIN_GAIN_SHARE,
    bounds: BoundSettings | None = None,
) -> CommitStudy:
    """Calibrate under the buffered rule and each of ``rules`` and choose each tier's rule.

    ``load(rule)``: the runs matrix under a rule (None: buffered). ``read(matrix)``:
    ``calibration.ttft.read_lengths`` of the same runs for that matrix's queries and models (answer
    tokens, timings, logprobs), for the first-token estimates. ``bounds``: each rule's tiers get
    their bounds (``calibration.bounds``), so a tier that commits on a prefix carries that rule's.
    """
    base = load(None)
    lengths = read(base)
    cost, quality = base.cost.mean(axis=0), base.quality.mean(axis=0)
    low_index, best_index = 0, int(np.argmax(quality))
    low = (float(cost[low_index]), float(quality[low_index]))
    best = (float(cost[best_index]), float(quality[best_index]))
    results = []
    for rule in [None, *rules]:
        matrix = base if rule is None else load(rule)
        if matrix.models != base.models or not np.array_equal(matrix.query_ids, base.query_ids):
            raise ValueError(f"the runs under {rule_label(rule)} have other queries than under buffer")
        calibrated = calibrate(matrix, spec, heldout=settings, bounds=bounds)
        if calibrated.heldout is None:
            raise ValueError(f"no held-out expectations: {'; '.join(calibrated.notes)}")
        gain = {
            tier: tier_gain(doc["cost_usd"]["mean"], doc["quality"]["mean"], low, best)
            for tier, doc in calibrated.heldout.items()
        }
        first = {tier: _first_token(matrix, calibrated, tier, rule, lengths) for tier in spec.tiers}
        results.append(RuleResult(rule, calibrated, gain, first, model_auroc(matrix)))
    study = CommitStudy(results, {}, min_share, (low, best))
    for tier in spec.tiers:
        study.chosen[tier] = _choose(study, tier)
    return study


def keeps_gain(gain: float, buffered: float, min_share: float) -> bool:
    """Whether a prefix rule's held-out ``gain`` keeps the buffered rule's: at least ``min_share``
    of it when it is positive, else no lower (a buffered rule no better than random routing has no
    gain a prefix rule could lose)."""
    if not (np.isfinite(gain) and np.isfinite(buffered)):
        return False
    return gain >= min_share * buffered if buffered > 0 else gain >= buffered


def _choose(study: CommitStudy, tier: str) -> RuleResult:
    buffered = study.results[0]
    start = buffered.first_token[tier].accepted
    qualifying = [
        result
        for result in study.results[1:]
        if keeps_gain(result.gain[tier], buffered.gain[tier], study.min_share)
        and _sooner(result.first_token[tier].accepted, start)
    ]
    if not qualifying:
        return buffered

    def soonest(result: RuleResult) -> tuple[float, float]:
        timing = result.first_token[tier].accepted
        return (timing[0] if timing is not None else float("inf"), -result.gain[tier])

    return min(qualifying, key=soonest)


def _sooner(candidate: tuple[float, float] | None, buffered: tuple[float, float] | None) -> bool:
    """Whether accepted streams start sooner (p50) than under the buffered rule: a prefix no shorter
    than the cheap answers decides where the buffered rule does and is not worth a commit rule."""
    return candidate is not None and (buffered is None or candidate[0] < buffered[0] * (1 - 1e-9))


def _first_token(
    matrix: RunsMatrix,
    calibrated: Calibrated,
    tier: str,
    rule: CommitRule | None,
    lengths: tuple[np.ndarray, dict[str, Timing], np.ndarray],
) -> FirstToken:
    """The tier's full-data route (its largest share) and each query's estimated first token."""
    tokens, timings, content = lengths
    solution = calibrated.solutions[tier]
    share = max(solution.routes, key=lambda route: route.weight)
    columns = [matrix.model_index(name) for name in share.models]
    read = prefix_tokens(content[:, columns], tokens[:, columns], rule)
    seconds, escalated = route_first_token(
        matrix.score[:, columns], tuple(share.thresholds), read, [timings[m] for m in share.models]
    )
    cheap = timings[share.models[0]]

    def percentiles(mask: np.ndarray) -> tuple[float, float] | None:
        if not mask.any():
            return None
        p50, p95 = np.percentile(seconds[mask], [50, 95])
        return float(p50), float(p95)

    return FirstToken(
        accepted=percentiles(~escalated),
        escalated=percentiles(escalated) if len(columns) > 1 else None,
        cheap_alone=float(cheap.at(1.0)),
        decided_tokens=float(read[:, 0].mean()) if len(columns) > 1 else 1.0,
    )


def apply_choice(document: dict[str, Any], study: CommitStudy) -> dict[str, Any]:
    """The policy document with each tier that chose ``prefix`` calibrated under it: its routes and
    expectations from that rule's calibration, and its ``commit``. Buffered tiers keep their bytes."""
    out = dict(document)
    tiers = dict(out["tiers"])
    for tier, result in study.chosen.items():
        if result.rule is None:
            continue
        prefix_tier = dict(result.calibrated.document["tiers"][tier])
        prefix_tier["commit"] = result.rule.document()
        tiers[tier] = prefix_tier
    out["tiers"] = tiers
    return with_prefix_shift_references(out, study)


def with_prefix_shift_references(document: dict[str, Any], study: CommitStudy) -> dict[str, Any]:
    """``document`` whose prefix tiers' shift references (``calibration.policy.shift_reference``) are
    their rule's: the gateway watches the scores of the prefixes it decides on."""
    if "shift_reference" not in document:
        return document
    references = dict(document["shift_reference"]["tiers"])
    for tier, result in study.chosen.items():
        if result.rule is None:
            continue
        prefix = result.calibrated.document.get("shift_reference", {}).get("tiers", {}).get(tier)
        if prefix is None:
            references.pop(tier, None)
        else:
            references[tier] = prefix
    return {**document, "shift_reference": {**document["shift_reference"], "tiers": references}}
