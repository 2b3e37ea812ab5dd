"""A pre-generation router as a policy carries it: one linear model per pool model, and its rules.

``p_m(x) = sigmoid(coef[m] . x + intercept[m])`` estimates P(model m answers a request with
features x correctly) (``policies.route_features``). Calibration folds its whole pipeline (centering,
principal components, standardization, logistic regression) into these coefficients, so serving is
one small matrix-vector product whatever was fitted.

Two rules read the probabilities:

* **routed**: send the request to ``argmax_m p_m(x) - price_weight * cost_m`` (ties: the cheaper
  model; ``cost_m`` the model's mean calibration cost), one call, no cascade;
* **hybrid** (route, then cascade): if ``p_cheap(x) < direct_below`` the request goes straight to the
  strong model (the router is sure the cheap one would fail, so its call is not paid); otherwise it
  runs the cascade route cheap -> strong at its calibrated threshold.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, field
from operator import itemgetter
from typing import TYPE_CHECKING, overload

import numpy as np

if TYPE_CHECKING:
    from policies.route_features import SparseFeatures
    from policies.routing_schema import RouterSpec, TierRouting


def _sigmoid(z: np.ndarray) -> np.ndarray:
    return 0.5 * (1.0 + np.tanh(0.5 * z))  # the logistic function, without overflow warnings


@dataclass(frozen=True)
class LinearRouter:
    """Per-model linear correctness models on one feature set."""

    features: str
    models: tuple[str, ...]
    coef: np.ndarray  # (k, d)
    intercept: np.ndarray  # (k,)
    # The same coefficients as Python floats, read by ``sparse_probabilities`` (one request, no numpy).
    _rows: tuple[tuple[float, ...], ...] = field(init=False, repr=False, compare=False)
    _intercepts: tuple[float, ...] = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        rows = tuple(tuple(float(v) for v in row) for row in np.atleast_2d(self.coef))
        object.__setattr__(self, "_rows", rows)
        object.__setattr__(self, "_intercepts", tuple(float(v) for v in np.ravel(self.intercept)))

    @classmethod
    def from_spec(cls, spec: RouterSpec) -> LinearRouter:
        """The router a policy's ``router`` section describes, as the gateway evaluates it."""
        return cls(spec.features, tuple(spec.models), np.asarray(spec.coef), np.asarray(spec.intercept))

    def probabilities(self, features: np.ndarray) -> np.ndarray:
        """P(correct) per model: ``(k,)`` for one vector ``(d,)``, ``(n, k)`` for rows ``(n, d)``."""
        return _sigmoid(np.asarray(features, dtype=np.float64) @ self.coef.T + self.intercept)

    def sparse_probabilities(self, features: SparseFeatures) -> list[float]:
        """P(correct) per model for one vector given by its nonzero entries, in plain Python: the
        request path's form of ``probabilities`` (equal to rounding). Per group of entries sharing
        a value (``SparseFeatures.groups``), the value times the sum of their coefficients: one
        product per group rather than per entry."""
        tanh, fsum = math.tanh, math.fsum
        # itemgetter of two indices or more: a tuple of the row's coefficients, read in C.
        groups = [(value, itemgetter(*indices)) for value, indices in features.groups]
        singles = features.singles
        out = []
        for row, intercept in zip(self._rows, self._intercepts, strict=True):
            # A handful of terms added in order (no fsum): equal to numpy's product to rounding.
            z = intercept
            for index, value in singles:
                z += row[index] * value
            for value, coefficients in groups:
                z += value * fsum(coefficients(row))
            out.append(0.5 * (1.0 + tanh(0.5 * z)))
        return out

    def probability_of(self, model: str, features: np.ndarray) -> float:
        """P(correct) of one model for one feature vector."""
        index = self.models.index(model)
        return float(
            _sigmoid(np.asarray(features, dtype=np.float64) @ self.coef[index] + self.intercept[index])
        )


def routed_choice(
    p_correct: Sequence[float] | np.ndarray, model_cost: Sequence[float], price_weight: float
) -> int:
    """Index of the model a routed tier sends a request to: argmax of p - price_weight * cost.

    Ties go to the cheaper model, as in calibration (``calibration.routing.routed.route_choices``
    orders the pool by cost, so its arg-max's first index is the cheaper one); between equal costs
    the earlier model. Plain Python: a handful of models per request.
    """
    costs = [float(cost) for cost in model_cost]
    if len(p_correct) != len(costs):
        raise ValueError(f"{len(p_correct)} probabilities for {len(costs)} model costs")
    return ordered_choice(p_correct, costs, cost_order(costs), price_weight)


def cost_order(model_cost: Sequence[float]) -> list[int]:
    """The models' indices from the cheapest up, equal costs in their order: the order in which
    ``routed_choice`` breaks ties (computed once per router by the gateway)."""
    costs = [float(cost) for cost in model_cost]
    return sorted(range(len(costs)), key=costs.__getitem__)  # stable: equal costs keep order


def ordered_choice(
    p_correct: Sequence[float] | np.ndarray, costs: Sequence[float], order: Sequence[int], price_weight: float
) -> int:
    """``routed_choice`` given the costs as floats and their ``cost_order``: the first model of
    ``order`` whose ``p - price_weight * cost`` no later model exceeds."""
    best, top = -1, 0.0
    for index in order:
        utility = float(p_correct[index]) - price_weight * costs[index]
        if best < 0 or utility > top:
            best, top = index, utility
    return best


@overload
def goes_direct(p_cheap: float, direct_below: float) -> bool: ...


@overload
def goes_direct(p_cheap: np.ndarray, direct_below: float) -> np.ndarray: ...


def goes_direct(p_cheap: float | np.ndarray, direct_below: float) -> bool | np.ndarray:
    """Whether a hybrid tier sends a request straight to its strong model: the router's probability
    that the cheap model answers it correctly is below ``direct_below``. Elementwise for an array
    of probabilities (calibration scores many requests at once with the same rule)."""
    return p_cheap < direct_below


@dataclass(frozen=True)
class ServedRoute:
    """What a routed tier serves one request with: its route's ``models`` and ``thresholds``, the
    ``mechanism`` that chose them (``routed``, ``hybrid_direct`` or ``hybrid_cascade``) and the
    router ``probability`` reported for the request (routed: the chosen model's; hybrid: the first
    model's)."""

    models: tuple[str, ...]
    thresholds: tuple[float, ...]
    mechanism: str
    probability: float


def served_route(
    routing: TierRouting, router: LinearRouter, p_correct: np.ndarray, model_cost: Sequence[float]
) -> ServedRoute:
    """The route a tier with ``routing`` serves a request with, from the router's probabilities
    ``p_correct`` ``(k,)`` for it and the router's per-model ``model_cost`` (module docstring)."""
    if routing.mechanism == "routed":
        assert routing.price_weight is not None
        index = routed_choice(p_correct, model_cost, routing.price_weight)
        return ServedRoute((router.models[index],), (), "routed", float(p_correct[index]))
    assert routing.models is not None
    probability = float(p_correct[router.models.index(routing.models[0])])
    if len(routing.models) == 1:
        return ServedRoute(tuple(routing.models), (), "hybrid_direct", probability)
    assert routing.threshold is not None and routing.direct_below is not None
    cheap, strong = routing.models
    if goes_direct(probability, routing.direct_below):
        return ServedRoute((strong,), (), "hybrid_direct", probability)
    return ServedRoute((cheap, strong), (routing.threshold,), "hybrid_cascade", probability)
