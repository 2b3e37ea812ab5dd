"""The shift alarm's detector (stats.shift_detector) and its chi-square tail (stats.chi_square): quiet on
in-distribution traffic, firing soon after a shift. Seeds are fixed: the counts are the same every run."""

from __future__ import annotations

import random

import pytest

from stats.chi_square import chi_square_critical, chi_square_sf, two_sample_chi_square
from stats.shift_detector import ShiftDetector

# A score histogram of ten bins (uneven, as tied scores make them) and an escalation rate of 30%.
SHARES = [0.02, 0.05, 0.08, 0.1, 0.1, 0.1, 0.1, 0.15, 0.15, 0.15]
ESCALATION = 0.3


@pytest.mark.parametrize(
    ("x", "df", "p"),
    [
        (3.841458820694124, 1, 0.05),
        (16.918977604620448, 9, 0.05),
        (21.665994333461924, 9, 0.01),
        (0.0, 3, 1.0),
    ],
)
def test_the_chi_square_tail_matches_published_quantiles(x: float, df: int, p: float) -> None:
    assert chi_square_sf(x, df) == pytest.approx(p, rel=1e-9)
    if p < 1:
        assert chi_square_critical(p, df) == pytest.approx(x, rel=1e-6)


def test_the_two_sample_statistic_ignores_empty_bins_and_is_zero_for_proportional_histograms() -> None:
    assert two_sample_chi_square([10, 0, 30], [20, 0, 60]) == (0.0, 1)
    statistic, df = two_sample_chi_square([40, 0], [0, 40])
    assert df == 1 and statistic == pytest.approx(80.0)


def _draw(rng: random.Random, shares: list[float], escalation: float) -> tuple[int, int]:
    score_bin = rng.choices(range(len(shares)), weights=shares)[0]
    return score_bin, 1 if rng.random() < escalation else 0


def _reference(rng: random.Random, rows: int) -> list[list[float]]:
    """A calibration of ``rows`` queries drawn from the in-distribution traffic."""
    scores, escalations = [0.0] * len(SHARES), [0.0, 0.0]
    for _ in range(rows):
        score_bin, escalated = _draw(rng, SHARES, ESCALATION)
        scores[score_bin] += 1
        escalations[escalated] += 1
    return [scores, escalations]


def test_in_distribution_traffic_stays_quiet_for_50000_requests() -> None:
    rng = random.Random(0)
    detector = ShiftDetector(_reference(rng, 500), window=400, blocks=4, alpha=1e-5, combine="fisher")
    fired = [i for i in range(50_000) if detector.observe(_draw(rng, SHARES, ESCALATION))]
    assert fired == []
    assert len(detector.last_p_values) == 2 and min(detector.last_p_values) > 1e-5


def test_a_shifted_stream_fires_within_one_window_of_the_shift() -> None:
    rng = random.Random(1)
    detector = ShiftDetector(_reference(rng, 500), window=400, blocks=4, alpha=1e-5, combine="fisher")
    for _ in range(400):  # a full window of in-distribution traffic
        assert not detector.observe(_draw(rng, SHARES, ESCALATION))
    # Confidently wrong: scores move to the top bins and the escalation rate barely moves.
    shifted = [0.01, 0.01, 0.02, 0.04, 0.06, 0.06, 0.1, 0.2, 0.25, 0.25]
    delay = next(i for i in range(1, 5_000) if detector.observe(_draw(rng, shifted, 0.25)))
    assert delay <= 400


def test_nothing_is_tested_before_the_window_is_full_and_a_reset_starts_afresh() -> None:
    detector = ShiftDetector([[50, 50], [50, 50]], window=40, blocks=4, alpha=0.01)
    assert not any(detector.observe((0, 0)) for _ in range(39))  # lopsided, but not a full window yet
    assert detector.observe((0, 0))
    detector.reset()
    assert detector.totals == [[0, 0], [0, 0]] and detector.last_p_values == []
    assert not any(detector.observe((0, 0)) for _ in range(39))


def test_a_window_that_does_not_split_into_blocks_is_refused() -> None:
    with pytest.raises(ValueError, match="multiple"):
        ShiftDetector([[1, 1]], window=10, blocks=3, alpha=0.01)
