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

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np


def _sigmoid(z: np.ndarray) -> np.ndarray:
    return 0.5 * (1.0 + np.tanh(0.5 * z))  # the logistic function, without overflow warnings


@dataclass(frozen=True)
class LinearRouter:
    """Per-model linear correctness models on one feature set."""

    features: str
    models: tuple[str, ...]
    coef: np.ndarray  # (k, d)
    intercept: np.ndarray  # (k,)

    def probabilities(self, features: np.ndarray) -> np.ndarray:
        """P(correct) per model: ``(k,)`` for one vector ``(d,)``, ``(n, k)`` for rows ``(n, d)``."""
        return _sigmoid(np.asarray(features, dtype=np.float64) @ self.coef.T + self.intercept)

    def probability_of(self, model: str, features: np.ndarray) -> float:
        """P(correct) of one model for one feature vector."""
        index = self.models.index(model)
        return float(
            _sigmoid(np.asarray(features, dtype=np.float64) @ self.coef[index] + self.intercept[index])
        )


def routed_choice(p_correct: np.ndarray, model_cost: Sequence[float], price_weight: float) -> int:
    """Index of the model a routed tier sends a request to: argmax of p - price_weight * cost.

    Ties go to the cheaper model, as in calibration (``calibration.routing.routed.route_choices``
    orders the pool by cost, so its arg-max's first index is the cheaper one).
    """
    cost = np.asarray(model_cost, dtype=np.float64)
    utility = np.asarray(p_correct, dtype=np.float64) - price_weight * cost
    order = np.lexsort((np.arange(cost.size), cost))
    return int(order[int(np.argmax(utility[order]))])


def goes_direct(p_cheap: float, direct_below: float) -> bool:
    """Whether a hybrid tier sends a request straight to its strong model."""
    return p_cheap < direct_below
