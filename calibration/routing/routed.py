"""The routed mechanism as a policy serves it: one model per query, no cascade.

For a price lambda (quality per USD) a query goes to ``argmax_m p_m(x) - lambda * c_m``, with
p_m(x) a router's probability that model m answers x correctly and c_m the model's mean cost on the
rows the router was fitted on (a router decides before any call, so it cannot see the realized
cost). A sweep over lambda traces the router's cost-quality curve; ``calibration.routing.mechanisms``
chooses a lambda per tier, ``calibration.evaluation`` measures the choice held out.
"""

from __future__ import annotations

import numpy as np

N_LAMBDAS = 300
_LAMBDAS_PER_CHUNK = 32  # bounds the (lambdas x queries x models) work array


def lambda_sweep(model_cost: np.ndarray, n: int = N_LAMBDAS) -> np.ndarray:
    """0 and ``n - 1`` geometric prices (quality per USD) from "cost barely matters" to "only cost".

    At the low end lambda * (cost spread) is 1e-3 of a probability; at the high end the cheapest
    model wins even against a model 100 probability points better.
    """
    spread = float(np.ptp(model_cost))
    cheapest_gap = np.diff(np.unique(model_cost))
    smallest_gap = float(cheapest_gap.min()) if cheapest_gap.size else max(spread, 1e-12)
    if spread <= 0:
        return np.zeros(1)
    return np.concatenate(([0.0], np.geomspace(1e-3 / spread, 100.0 / smallest_gap, n - 1)))


def route_choices(p_correct: np.ndarray, model_cost: np.ndarray, lambdas: np.ndarray) -> np.ndarray:
    """``(L, n)`` model index per lambda and query: argmax of p - lambda * cost (ties: cheaper model)."""
    choices = np.empty((lambdas.size, p_correct.shape[0]), dtype=np.int64)
    for start in range(0, lambdas.size, _LAMBDAS_PER_CHUNK):
        block = lambdas[start : start + _LAMBDAS_PER_CHUNK]
        utility = p_correct[None, :, :] - block[:, None, None] * model_cost[None, None, :]
        choices[start : start + block.size] = utility.argmax(axis=2)
    return choices


def routed_outcomes(
    choices: np.ndarray, cost: np.ndarray, quality: np.ndarray
) -> tuple[np.ndarray, np.ndarray]:
    """``(L,)`` mean realized cost and quality of routing ``choices`` (L, n) on (n, k) outcomes."""
    rows = np.arange(choices.shape[1])[None, :]
    return cost[rows, choices].mean(axis=1), quality[rows, choices].mean(axis=1)
