"""Budget tiers (docs/calibrate.md, "The tiers file"): solve each tier's objective on the envelope.

TIERS.yaml::

    default_tier: balanced
    tiers:
      economy:  {max_cost_usd: 0.00004}   # P2: best quality within this mean cost per query
      balanced: {max_cost_usd: 0.0001}
      quality:  {min_quality: 0.85}       # P1: cheapest route whose mean quality reaches this

Deterministic (default): the best envelope point within the budget (P2), or the cheapest envelope
point reaching the quality (P1). Randomized: a mixture of the two adjacent concave-hull vertices
whose expected cost equals the budget (P2) or whose expected quality equals the target (P1).

Unreachable objectives: a budget below the cheapest route gets the cheapest route and a warning;
a min_quality above the best reachable quality is an ``UnreachableTierError``.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import yaml

from calibration.envelope import Envelope

# Relative slack for comparing a budget or quality target with float-summed envelope values.
_RELATIVE_TOLERANCE = 1e-9
# A mixture weight this small is a vertex, not a mixture.
_MIN_WEIGHT = 1e-9


class TiersError(Exception):
    """The tiers file is unreadable or malformed (one-line message naming file and tier)."""


class UnreachableTierError(TiersError):
    """A tier's min_quality is above every quality the envelope reaches.

    ``warnings`` carries the warnings of the tiers that were solved (e.g. a budget below the
    cheapest route), so a caller that reports this error can report them too.
    """

    def __init__(self, message: str, tier: str, warnings: tuple[str, ...] = ()) -> None:
        super().__init__(message)
        self.tier = tier
        self.warnings = warnings


@dataclass(frozen=True)
class TierObjective:
    """Exactly one of: ``max_cost_usd`` (USD per query, P2) or ``min_quality`` in [0, 1] (P1)."""

    max_cost_usd: float | None = None
    min_quality: float | None = None

    def as_dict(self) -> dict[str, float]:
        """The objective as in the policy file."""
        if self.max_cost_usd is not None:
            return {"max_cost_usd": self.max_cost_usd}
        assert self.min_quality is not None
        return {"min_quality": self.min_quality}

    def describe(self) -> str:
        """'max_cost_usd=4e-05' or 'min_quality=0.85'."""
        key, value = next(iter(self.as_dict().items()))
        return f"{key}={value:g}"


@dataclass(frozen=True)
class TiersSpec:
    """Parsed TIERS.yaml: default tier name and each tier's objective (file order)."""

    default_tier: str
    tiers: dict[str, TierObjective]


@dataclass(frozen=True)
class RouteShare:
    """One route of a tier with its weight; ``envelope_index`` is its envelope point."""

    weight: float
    models: tuple[str, ...]
    thresholds: tuple[float, ...]
    envelope_index: int


@dataclass(frozen=True)
class TierSolution:
    """A solved tier: its route(s), expected cost (USD/query), quality, escalation rate, shadow price.

    ``shadow_price`` is quality per USD: the slope of the concave hull at the tier's expected cost
    (the segment starting at or before it), None below the cheapest point or at the top of the
    envelope. ``warning`` is set when the objective could not be met (budget below the cheapest).
    """

    name: str
    objective: TierObjective
    routes: list[RouteShare]
    cost: float
    quality: float
    escalation_rate: float
    shadow_price: float | None
    warning: str | None = None


def load_tiers(path: str | Path) -> TiersSpec:
    """Read and validate TIERS.yaml; TiersError with a one-line message otherwise."""
    path = Path(path)
    try:
        document = yaml.safe_load(path.read_text())
    except OSError as exc:
        raise TiersError(f"{path}: cannot read tiers file ({exc.strerror})") from exc
    except yaml.YAMLError as exc:
        raise TiersError(f"{path}: not valid YAML ({str(exc).splitlines()[0]})") from exc
    return parse_tiers(document, str(path))


def parse_tiers(document: object, source: str = "<tiers>") -> TiersSpec:
    """Validate a tiers document (already parsed YAML)."""
    if not isinstance(document, Mapping) or not isinstance(document.get("tiers"), Mapping):
        raise TiersError(
            f"{source}: needs a 'tiers:' mapping of NAME: {{max_cost_usd: X}} | {{min_quality: Q}}"
        )
    unknown = sorted(set(document) - {"default_tier", "tiers"})
    if unknown:
        raise TiersError(f"{source}: unknown top-level key(s) {', '.join(map(str, unknown))}")
    tiers: dict[str, TierObjective] = {}
    for name, entry in document["tiers"].items():
        tiers[str(name)] = _parse_objective(entry, f"{source}: tiers.{name}")
    if not tiers:
        raise TiersError(f"{source}: 'tiers' is empty")
    default = document.get("default_tier")
    if default is None:
        raise TiersError(f"{source}: missing 'default_tier' (one of {', '.join(tiers)})")
    if str(default) not in tiers:
        raise TiersError(f"{source}: default_tier '{default}' is not one of the tiers ({', '.join(tiers)})")
    return TiersSpec(default_tier=str(default), tiers=tiers)


def _parse_objective(entry: object, where: str) -> TierObjective:
    if (
        not isinstance(entry, Mapping)
        or len(entry) != 1
        or next(iter(entry))
        not in (
            "max_cost_usd",
            "min_quality",
        )
    ):
        raise TiersError(f"{where}: needs exactly one of max_cost_usd or min_quality")
    key, raw = next(iter(entry.items()))
    try:
        value = float(raw)
    except (TypeError, ValueError):
        raise TiersError(f"{where}.{key}: not a number ({raw!r})") from None
    if not math.isfinite(value) or value < 0:
        raise TiersError(f"{where}.{key}: must be a finite number >= 0")
    if key == "min_quality":
        if value > 1:
            raise TiersError(f"{where}.min_quality: must be in [0, 1]")
        return TierObjective(min_quality=value)
    return TierObjective(max_cost_usd=value)


def solve_tiers(envelope: Envelope, spec: TiersSpec, *, randomize: bool = False) -> dict[str, TierSolution]:
    """Solve every tier of ``spec`` (file order).

    Every tier is tried before failing, so one UnreachableTierError names the first unreachable
    tier and carries the warnings of all the others (the user fixes the file once, not per run).
    """
    solutions: dict[str, TierSolution] = {}
    unreachable: list[UnreachableTierError] = []
    for name, objective in spec.tiers.items():
        try:
            solutions[name] = solve_tier(envelope, objective, randomize=randomize, name=name)
        except UnreachableTierError as exc:
            unreachable.append(exc)
    if unreachable:
        message = str(unreachable[0])
        if len(unreachable) > 1:
            message += f" (also unreachable: {', '.join(exc.tier for exc in unreachable[1:])})"
        warnings = tuple(s.warning for s in solutions.values() if s.warning)
        raise UnreachableTierError(message, unreachable[0].tier, warnings)
    return solutions


def solve_tier(
    envelope: Envelope, objective: TierObjective, *, randomize: bool = False, name: str = "tier"
) -> TierSolution:
    """Route(s) for one objective on the envelope (see module docstring)."""
    if len(envelope) == 0:
        raise TiersError("the envelope is empty")
    if objective.max_cost_usd is not None:
        return _solve_budget(envelope, objective, objective.max_cost_usd, randomize, name)
    assert objective.min_quality is not None
    return _solve_quality(envelope, objective, objective.min_quality, randomize, name)


def _solve_budget(
    envelope: Envelope, objective: TierObjective, budget: float, randomize: bool, name: str
) -> TierSolution:
    slack = budget * _RELATIVE_TOLERANCE
    if budget + slack < envelope.cost[0]:
        warning = (
            f"tier '{name}': budget ${budget:.6g}/query is below the cheapest route "
            f"({envelope.route_label(0)} at ${envelope.cost[0]:.6g}); using the cheapest route"
        )
        return _deterministic(envelope, 0, objective, name, warning=warning, shadow=None)
    if not randomize:
        index = int(np.searchsorted(envelope.cost, budget + slack, side="right")) - 1
        return _deterministic(envelope, index, objective, name)
    hull_cost = envelope.cost[envelope.hull]
    right = int(np.searchsorted(hull_cost, budget + slack, side="right"))
    if right >= hull_cost.shape[0]:
        return _deterministic(envelope, int(envelope.hull[-1]), objective, name)
    left = right - 1
    weight = (budget - hull_cost[left]) / (hull_cost[right] - hull_cost[left])
    return _mixture(envelope, left, right, float(weight), objective, name)


def _solve_quality(
    envelope: Envelope, objective: TierObjective, target: float, randomize: bool, name: str
) -> TierSolution:
    slack = max(target, 1e-300) * _RELATIVE_TOLERANCE
    best = envelope.quality[-1]
    if target - slack > best:
        raise UnreachableTierError(
            f"tier '{name}': min_quality {target:g} is above the best quality these runs reach "
            f"({best:.4f}, by {envelope.route_label(len(envelope) - 1)}); lower it or add a stronger model",
            name,
        )
    if not randomize:
        index = int(np.searchsorted(envelope.quality, target - slack, side="left"))
        return _deterministic(envelope, index, objective, name)
    hull_quality = envelope.quality[envelope.hull]
    right = int(np.searchsorted(hull_quality, target - slack, side="left"))
    if right == 0:
        return _deterministic(envelope, int(envelope.hull[0]), objective, name)
    left = right - 1
    weight = (target - hull_quality[left]) / (hull_quality[right] - hull_quality[left])
    return _mixture(envelope, left, right, float(weight), objective, name)


def _deterministic(
    envelope: Envelope,
    index: int,
    objective: TierObjective,
    name: str,
    *,
    warning: str | None = None,
    shadow: float | str | None = "hull",
) -> TierSolution:
    cost = float(envelope.cost[index])
    return TierSolution(
        name=name,
        objective=objective,
        routes=[_share(envelope, index, 1.0)],
        cost=cost,
        quality=float(envelope.quality[index]),
        escalation_rate=float(envelope.escalation_rate[index]),
        shadow_price=shadow_price_at(envelope, cost) if shadow == "hull" else None,
        warning=warning,
    )


def _mixture(
    envelope: Envelope, left: int, right: int, weight_right: float, objective: TierObjective, name: str
) -> TierSolution:
    """Mix hull vertices ``left`` and ``right`` (positions in ``envelope.hull``)."""
    low, high = int(envelope.hull[left]), int(envelope.hull[right])
    if weight_right <= _MIN_WEIGHT:
        return _deterministic(envelope, low, objective, name)
    if weight_right >= 1 - _MIN_WEIGHT:
        return _deterministic(envelope, high, objective, name)
    weights = np.array([1.0 - weight_right, weight_right])
    points = np.array([low, high])
    cost = float(weights @ envelope.cost[points])
    slope = (envelope.quality[high] - envelope.quality[low]) / (envelope.cost[high] - envelope.cost[low])
    return TierSolution(
        name=name,
        objective=objective,
        routes=[_share(envelope, low, float(weights[0])), _share(envelope, high, float(weights[1]))],
        cost=cost,
        quality=float(weights @ envelope.quality[points]),
        escalation_rate=float(weights @ envelope.escalation_rate[points]),
        shadow_price=float(slope),
    )


def _share(envelope: Envelope, index: int, weight: float) -> RouteShare:
    return RouteShare(
        weight=weight,
        models=tuple(envelope.models[index]),
        thresholds=tuple(envelope.thresholds[index]),
        envelope_index=index,
    )


def shadow_price_at(envelope: Envelope, cost: float) -> float | None:
    """Quality per USD: slope of the concave-hull segment starting at or before ``cost``.

    None below the cheapest point, at or beyond the last hull vertex (the top of the envelope:
    more budget buys no quality), or for a one-point envelope.
    """
    hull_cost = envelope.cost[envelope.hull]
    hull_quality = envelope.quality[envelope.hull]
    slack = abs(cost) * _RELATIVE_TOLERANCE
    segment = int(np.searchsorted(hull_cost, cost + slack, side="right")) - 1
    if segment < 0 or segment >= hull_cost.shape[0] - 1:
        return None
    return float(
        (hull_quality[segment + 1] - hull_quality[segment]) / (hull_cost[segment + 1] - hull_cost[segment])
    )
