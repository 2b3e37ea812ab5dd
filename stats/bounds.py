"""One-sided confidence bounds on the mean of bounded values, and the sample size a bound needs.

Pure functions on numbers (numpy and the standard library only: ``stats`` is part of the core
install, which has no scipy):

* ``clopper_pearson_lower`` / ``clopper_pearson_upper``: exact binomial bounds for a mean of 0/1
  values (the Beta quantiles ``Beta(k, n-k+1)`` at delta and ``Beta(k+1, n-k)`` at 1 - delta), from
  the regularized incomplete Beta function (``regularized_beta``, a continued fraction) inverted
  by bisection.
* ``hoeffding_bentkus_lower`` / ``hoeffding_bentkus_upper``: bounds for a mean of any values in
  [0, 1] (fractional grades, mixtures of routes, costs divided by their worst case): the
  Hoeffding-Bentkus p-value of Bates et al. (2021), ``min(exp(-n kl(mean, m)), e P(Bin(n, m) <=
  ceil(n mean)))``, inverted by bisection. It is valid for every distribution on [0, 1] and never
  tighter than Clopper-Pearson on 0/1 values.
* ``mean_lower_bound`` / ``mean_upper_bound`` pick the exact bound for 0/1 values and
  Hoeffding-Bentkus otherwise, on a range ``[0, upper]``.
* ``queries_needed``: the smallest number of values at which a bound computed at the same observed
  mean would clear a target.

Each bound holds with probability at least ``1 - delta`` over the draw of n i.i.d. values;
several statements at once take a union bound (``bonferroni``).
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

_BISECTIONS = 80  # halves [0, 1] to below 1e-24: exact to float precision
_CF_TERMS = 400
_CF_EPS = 1e-15
_TINY = 1e-300
MAX_QUERIES = 10_000_000  # queries_needed's search ceiling


def bonferroni(confidence: float, statements: int) -> float:
    """The error level of each of ``statements`` bounds that hold together with ``confidence``."""
    if not 0.0 < confidence < 1.0:
        raise ValueError(f"confidence must be in (0, 1), got {confidence}")
    if statements < 1:
        raise ValueError(f"statements must be at least 1, got {statements}")
    return (1.0 - confidence) / statements


def regularized_beta(x: float, a: float, b: float) -> float:
    """The regularized incomplete Beta function I_x(a, b) for a, b > 0 and x in [0, 1].

    Lentz's continued fraction (Numerical Recipes' ``betacf``), on the side of x where it
    converges fast.
    """
    if a <= 0 or b <= 0:
        raise ValueError(f"a and b must be positive, got {a}, {b}")
    if x <= 0.0:
        return 0.0
    if x >= 1.0:
        return 1.0
    log_front = math.lgamma(a + b) - math.lgamma(a) - math.lgamma(b) + a * math.log(x) + b * math.log1p(-x)
    if x < (a + 1.0) / (a + b + 2.0):
        return math.exp(log_front) * _beta_fraction(x, a, b) / a
    return 1.0 - math.exp(log_front) * _beta_fraction(1.0 - x, b, a) / b


def _beta_fraction(x: float, a: float, b: float) -> float:
    c, d = 1.0, 1.0 - (a + b) * x / (a + 1.0)
    d = 1.0 / (d if abs(d) > _TINY else _TINY)
    result = d
    for m in range(1, _CF_TERMS + 1):
        for numerator in (
            m * (b - m) * x / ((a + 2 * m - 1) * (a + 2 * m)),
            -(a + m) * (a + b + m) * x / ((a + 2 * m) * (a + 2 * m + 1)),
        ):
            d = 1.0 + numerator * d
            d = 1.0 / (d if abs(d) > _TINY else _TINY)
            c = 1.0 + numerator / c
            c = c if abs(c) > _TINY else _TINY
            result *= d * c
        if abs(d * c - 1.0) < _CF_EPS:
            break
    return result


def binomial_cdf(k: float, n: int, p: float) -> float:
    """P(Bin(n, p) <= k), with k extended to real values through I_{1-p}(n - k, k + 1)."""
    if k < 0:
        return 0.0
    if k >= n:
        return 1.0
    return regularized_beta(1.0 - p, n - k, k + 1.0)


def _bisect(decreasing: Callable[[float], bool], low: float, high: float) -> float:
    """The point in [low, high] where ``decreasing`` turns from True to False."""
    for _ in range(_BISECTIONS):
        middle = (low + high) / 2.0
        if decreasing(middle):
            low = middle
        else:
            high = middle
    return (low + high) / 2.0


def _check(successes: float, n: int, delta: float) -> None:
    if n < 1:
        raise ValueError(f"a bound needs at least one value, got n={n}")
    if not 0.0 <= successes <= n:
        raise ValueError(f"successes must lie in [0, n], got {successes} of {n}")
    if not 0.0 < delta < 1.0:
        raise ValueError(f"delta must be in (0, 1), got {delta}")


def clopper_pearson_upper(successes: float, n: int, delta: float) -> float:
    """Exact upper bound on a Bernoulli mean: the p with P(Bin(n, p) <= successes) = delta."""
    _check(successes, n, delta)
    if successes >= n:
        return 1.0
    return _bisect(lambda p: binomial_cdf(successes, n, p) > delta, successes / n, 1.0)


def clopper_pearson_lower(successes: float, n: int, delta: float) -> float:
    """Exact lower bound on a Bernoulli mean: 1 - the upper bound of the failures' mean."""
    _check(successes, n, delta)
    return 1.0 - clopper_pearson_upper(n - successes, n, delta)


def _bernoulli_kl(mean: float, m: float) -> float:
    """kl(mean || m) between Bernoulli distributions, in nats."""
    total = 0.0
    if mean > 0:
        total += mean * math.log(mean / m)
    if mean < 1:
        total += (1 - mean) * math.log((1 - mean) / (1 - m))
    return total


def hoeffding_bentkus_p_value(mean: float, n: int, m: float) -> float:
    """p-value of "the true mean is at least m" after observing ``mean`` of n values in [0, 1]."""
    if m <= mean:
        return 1.0
    if m >= 1.0:
        return 0.0
    hoeffding = math.exp(-n * _bernoulli_kl(mean, m))
    bentkus = math.e * binomial_cdf(math.ceil(n * mean - 1e-9), n, m)
    return min(hoeffding, bentkus, 1.0)


def hoeffding_bentkus_upper(mean: float, n: int, delta: float) -> float:
    """Upper bound on the mean of values in [0, 1]: the largest m not rejected at level delta."""
    _check(mean * n, n, delta)
    if mean >= 1.0:
        return 1.0
    return _bisect(lambda m: hoeffding_bentkus_p_value(mean, n, m) > delta, mean, 1.0)


def hoeffding_bentkus_lower(mean: float, n: int, delta: float) -> float:
    """Lower bound on the mean of values in [0, 1] (the upper bound of 1 - value, mirrored)."""
    return 1.0 - hoeffding_bentkus_upper(1.0 - mean, n, delta)


@dataclass(frozen=True)
class Bound:
    """A one-sided bound on a mean: the ``value``, the observed ``mean``, n and the method's name."""

    value: float
    mean: float
    n: int
    method: str


def _prepare(values: np.ndarray, upper: float) -> tuple[np.ndarray, bool]:
    data = np.asarray(values, dtype=np.float64)
    if data.ndim != 1 or data.size == 0:
        raise ValueError("a bound needs a non-empty 1-d array of values")
    if not upper > 0:
        raise ValueError(f"the range's upper end must be positive, got {upper}")
    if data.min() < 0 or data.max() > upper * (1 + 1e-12):
        raise ValueError(f"values must lie in [0, {upper:g}]")
    scaled = np.clip(data / upper, 0.0, 1.0)
    return scaled, bool(np.all((scaled == 0.0) | (scaled == 1.0)))


def mean_lower_bound(values: np.ndarray, delta: float, upper: float = 1.0) -> Bound:
    """A ``1 - delta`` lower bound on the mean of values in [0, upper]: Clopper-Pearson for 0/1
    values (``upper`` = 1), Hoeffding-Bentkus otherwise."""
    scaled, binary = _prepare(values, upper)
    n, mean = scaled.size, float(scaled.mean())
    if binary and upper == 1.0:
        return Bound(clopper_pearson_lower(float(scaled.sum()), n, delta), mean, n, "clopper-pearson")
    return Bound(upper * hoeffding_bentkus_lower(mean, n, delta), upper * mean, n, "hoeffding-bentkus")


def mean_upper_bound(values: np.ndarray, delta: float, upper: float = 1.0) -> Bound:
    """A ``1 - delta`` upper bound on the mean of values in [0, upper] (see ``mean_lower_bound``)."""
    scaled, binary = _prepare(values, upper)
    n, mean = scaled.size, float(scaled.mean())
    if binary and upper == 1.0:
        return Bound(clopper_pearson_upper(float(scaled.sum()), n, delta), mean, n, "clopper-pearson")
    return Bound(upper * hoeffding_bentkus_upper(mean, n, delta), upper * mean, n, "hoeffding-bentkus")


def _bound_at(method: str, side: str, mean: float, n: int, delta: float) -> float:
    if method == "clopper-pearson":
        exact = clopper_pearson_lower if side == "lower" else clopper_pearson_upper
        return exact(mean * n, n, delta)
    bounded = hoeffding_bentkus_lower if side == "lower" else hoeffding_bentkus_upper
    return bounded(mean, n, delta)


def queries_needed(mean: float, target: float, delta: float, *, side: str, method: str) -> int | None:
    """The smallest n at which the ``side`` (``lower``/``upper``) bound of ``method`` at this
    observed ``mean`` (in [0, 1]) clears ``target``: lower bound >= target, upper bound <= target.

    None when no n does (the mean itself is not strictly on the target's good side) or when it
    would take more than ``MAX_QUERIES``.
    """
    if side not in ("lower", "upper"):
        raise ValueError(f"side must be lower or upper, got {side!r}")

    def clears(n: int) -> bool:
        value = _bound_at(method, side, mean, n, delta)
        return value >= target if side == "lower" else value <= target

    if (side == "lower" and mean <= target) or (side == "upper" and mean >= target):
        return None
    high = 1
    while not clears(high):
        if high >= MAX_QUERIES:
            return None
        high = min(MAX_QUERIES, high * 2)
    low = high // 2  # does not clear (or 0)
    while high - low > 1:
        middle = (low + high) // 2
        if clears(middle):
            high = middle
        else:
            low = middle
    return high
