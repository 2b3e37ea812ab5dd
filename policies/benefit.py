"""The ``escalation_benefit`` scorer: how likely escalating this answer would *not* help, from the
answer's own token logprobs, by a model fitted at calibration (``calibration.benefit_fit``).

A confidence score predicts whether the cheap answer is right. What a cascade needs is whether
escalating helps: the cheap answer wrong *and* the stronger model right. Those differ where both
models fail the same questions. The benefit scorer is fitted on exactly that label, for one pair
(the scored model, the model it escalates to), from the cheap answer's features:

* the logprob scores of ``policies.scorers`` over the whole answer (``FEATURES``),
* the mean token negentropy of its first ``PREFIX_TOKENS`` tokens (a prefix predicts where
  escalation helps better than the whole answer on the word-problem runs),
* the answer's length in tokens (``log1p``).

The model is a logistic regression on standardized features, then an isotonic map from its
linear score to the probability that escalation does *not* help (calibrated on the fit's queries,
linear between the isotonic blocks' centres so distinct answers keep distinct scores). The score is
that probability: in [0, 1], higher = keep the cheap answer, like every other scorer. The same
function scores recorded logprobs at calibration and live ones in the gateway.
"""

from __future__ import annotations

import math
from bisect import bisect_right
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from policies.token_scores import (
    TokenEntry,
    TokenLogprobs,
    mean_logprob,
    mean_token_negentropy,
    min_probability,
    min_token_negentropy,
    probability_margin,
    quantile_token_negentropy,
    usable_entries,
)

# How far past the outer isotonic centres a score may move (it only orders the tails).
_TAIL = 1e-6

# The first tokens whose mean negentropy is a feature of its own.
PREFIX_TOKENS = 8

# (name, function of the parsed answer); the prefix and the length follow them.
_WHOLE_ANSWER: tuple[tuple[str, Callable[[TokenLogprobs], float | None]], ...] = (
    ("mean_token_negentropy", mean_token_negentropy),
    ("min_token_negentropy", min_token_negentropy),
    ("q10_token_negentropy", quantile_token_negentropy),
    ("probability_margin", probability_margin),
    ("min_probability", min_probability),
    ("mean_logprob", mean_logprob),
)
FEATURES: tuple[str, ...] = (
    *(name for name, _ in _WHOLE_ANSWER),
    f"prefix{PREFIX_TOKENS}_mean_token_negentropy",
    "log_tokens",
)


def answer_features(content: Sequence[TokenEntry] | None, top_k: int) -> list[float] | None:
    """The ``FEATURES`` of one answer's ``logprobs.content`` (None: no usable position).

    A feature a short answer cannot give (no position with alternatives) is 0, its least
    confident value; ``mean_logprob`` is clipped at -20 so one ``-inf`` stays a number.
    """
    entries = usable_entries(content or [])
    if not entries:
        return None
    whole = TokenLogprobs.from_content(entries, top_k)
    values = [_finite(function(whole)) for _, function in _WHOLE_ANSWER]
    prefix = TokenLogprobs.from_content(entries[:PREFIX_TOKENS], top_k)
    values.append(_finite(mean_token_negentropy(prefix)))
    values.append(math.log1p(len(entries)))
    return values


def _finite(value: float | None) -> float:
    if value is None or math.isnan(value):
        return 0.0
    return max(value, -20.0)


@dataclass(frozen=True, slots=True)
class BenefitModel:
    """A fitted benefit scorer: ``mean``/``scale`` standardize ``FEATURES``, ``coefficients`` and
    ``intercept`` give the linear score of "escalation helps", and the isotonic blocks' centres
    (``knots_x`` strictly increasing, ``knots_y`` in [0, 1], increasing) map minus that linear
    score to the probability that it does not."""

    mean: tuple[float, ...]
    scale: tuple[float, ...]
    coefficients: tuple[float, ...]
    intercept: float
    knots_x: tuple[float, ...]
    knots_y: tuple[float, ...]

    def linear(self, features: Sequence[float]) -> float:
        """Minus the logistic regression's linear score of "escalation helps" (higher = keep)."""
        total = self.intercept
        for value, mean, scale, weight in zip(
            features, self.mean, self.scale, self.coefficients, strict=True
        ):
            total += weight * (value - mean) / scale
        return -total

    def probability(self, linear: float) -> float:
        """The isotonic map of ``linear``: P(escalation does not help).

        Linear between the isotonic blocks' centres (``knots``), so distinct answers keep distinct
        scores and a threshold can fall between any two; beyond the outer centres it moves by at
        most ``_TAIL`` towards 0 or 1, for the same reason.
        """
        xs, ys = self.knots_x, self.knots_y
        if linear <= xs[0]:
            return max(0.0, ys[0] - _TAIL * (1.0 - math.exp(linear - xs[0])))
        if linear >= xs[-1]:
            return min(1.0, ys[-1] + _TAIL * (1.0 - math.exp(xs[-1] - linear)))
        right = bisect_right(xs, linear)
        x0, x1, y0, y1 = xs[right - 1], xs[right], ys[right - 1], ys[right]
        return y0 + (y1 - y0) * (linear - x0) / (x1 - x0)

    def from_features(self, features: Sequence[float]) -> float:
        """The benefit score of an answer's ``FEATURES``."""
        return self.probability(self.linear(features))

    def score(self, content: Sequence[TokenEntry] | None, top_k: int) -> float | None:
        """The benefit score of one answer (None: no usable position)."""
        features = answer_features(content, top_k)
        return None if features is None else self.from_features(features)
