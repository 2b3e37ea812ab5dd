"""The chi-square distribution's upper tail, and the two-sample chi-square statistic of two histograms.

Pure Python (no SciPy): the gateway, which does not install the calibration extra, tests live
histograms against the calibration's with it (``stats.shift_detector``). ``chi_square_sf`` is the
regularized upper incomplete gamma function Q(df/2, x/2), by its series below ``a + 1`` and its
continued fraction above (the classic pairing, accurate to about 1e-12 relative here).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from functools import lru_cache

_ITERATIONS = 500
_EPSILON = 1e-15
_TINY = 1e-300


def chi_square_sf(x: float, df: int) -> float:
    """P(X >= x) for X chi-square with ``df`` degrees of freedom (1 for x <= 0)."""
    if df < 1:
        raise ValueError(f"degrees of freedom must be at least 1, got {df}")
    if x <= 0:
        return 1.0
    a, z = df / 2.0, x / 2.0
    if z < a + 1.0:
        return max(0.0, 1.0 - _lower_series(a, z))
    return _upper_fraction(a, z)


def _lower_series(a: float, z: float) -> float:
    """P(a, z), the regularized lower incomplete gamma function, by its power series."""
    term = total = 1.0 / a
    denominator = a
    for _ in range(_ITERATIONS):
        denominator += 1.0
        term *= z / denominator
        total += term
        if abs(term) < abs(total) * _EPSILON:
            break
    return total * math.exp(-z + a * math.log(z) - math.lgamma(a))


def _upper_fraction(a: float, z: float) -> float:
    """Q(a, z) by its continued fraction (modified Lentz)."""
    b = z + 1.0 - a
    c = 1.0 / _TINY
    d = 1.0 / b
    h = d
    for i in range(1, _ITERATIONS):
        an = -i * (i - a)
        b += 2.0
        d = an * d + b
        d = _TINY if abs(d) < _TINY else d
        c = b + an / c
        c = _TINY if abs(c) < _TINY else c
        d = 1.0 / d
        delta = d * c
        h *= delta
        if abs(delta - 1.0) < _EPSILON:
            break
    return math.exp(-z + a * math.log(z) - math.lgamma(a)) * h


@lru_cache(maxsize=512)
def chi_square_critical(alpha: float, df: int) -> float:
    """The x with ``chi_square_sf(x, df) == alpha`` (bisection; cached per (alpha, df))."""
    if not 0.0 < alpha < 1.0:
        raise ValueError(f"alpha must lie in (0, 1), got {alpha}")
    low, high = 0.0, float(df) + 10.0
    while chi_square_sf(high, df) > alpha:
        high *= 2.0
    for _ in range(200):
        middle = (low + high) / 2.0
        if chi_square_sf(middle, df) > alpha:
            low = middle
        else:
            high = middle
        if high - low < 1e-9 * max(1.0, high):
            break
    return high


def two_sample_chi_square(live: Sequence[float], reference: Sequence[float]) -> tuple[float, int]:
    """The chi-square statistic of homogeneity of two histograms over the same bins, and its degrees
    of freedom (bins holding anything in either, minus one; 0: nothing to test).

    Both are samples: ``live`` of n, ``reference`` of m (the calibration's rows, possibly weighted);
    a bin's expected live count under homogeneity is ``n * (l_i + r_i) / (n + m)``. Testing against
    the reference as a sample rather than as exact shares keeps the false alarm rate at its level
    when the calibration had few rows (its own sampling noise is part of the null).
    """
    n, m = float(sum(live)), float(sum(reference))
    if n <= 0 or m <= 0:
        return 0.0, 0
    statistic, used = 0.0, 0
    for observed, calibrated in zip(live, reference, strict=True):
        pooled = observed + calibrated
        if pooled <= 0:
            continue
        used += 1
        expected_live = n * pooled / (n + m)
        expected_reference = m * pooled / (n + m)
        statistic += (observed - expected_live) ** 2 / expected_live
        statistic += (calibrated - expected_reference) ** 2 / expected_reference
    return statistic, used - 1
