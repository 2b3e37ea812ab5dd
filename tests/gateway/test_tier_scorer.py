"""A tier with a scorer of its own (``Tier.scorer``: ``escalation_benefit``, fitted for its pair) is
scored by it, live; the other tiers keep the section's scorer."""

from __future__ import annotations

from typing import Any

import pytest

from policies.benefit import FEATURES
from policies.benefit_schema import BenefitSpec
from policies.scorers import score_logprobs
from tests.support.scripted_upstream import chat_logprobs, ok

MESSAGES = [{"role": "user", "content": "What is the capital of France?"}]
TOP_K = 5

# A model that reads a confident answer as one escalation helps (the opposite of negentropy), so
# the decision shows which scorer made it: the linear score is minus 4 x the mean negentropy,
# mapped from [-4, 0] onto P(escalation does not help) in [0.1, 0.9].
BENEFIT: dict[str, Any] = {
    "scored": "small",
    "escalates_to": "large",
    "features": list(FEATURES),
    "mean": [0.0] * len(FEATURES),
    "scale": [1.0] * len(FEATURES),
    "coefficients": [4.0] + [0.0] * (len(FEATURES) - 1),
    "intercept": 0.0,
    "knots_x": [-4.0, 0.0],
    "knots_y": [0.1, 0.9],
    "fitted_on": 100,
    "helps": 30,
}


@pytest.fixture
def benefit_gateway(start_gateway, make_settings, write_policy):
    scorer = {"name": "escalation_benefit", "top_k": TOP_K, "benefit": BENEFIT}
    path = write_policy(tier_changes={"balanced": {"scorer": scorer}})
    return start_gateway(make_settings(policy=path))


def test_a_confident_answer_is_escalated_by_the_tiers_benefit_scorer(benefit_gateway, upstream) -> None:
    upstream.script("up-small", ok("Paris.", confidence=0.99))
    upstream.script("up-large", ok("Paris.", confidence=0.99))
    raw = benefit_gateway.client().chat.completions.with_raw_response.create(
        model="cascade/balanced", messages=MESSAGES
    )
    assert raw.headers["x-cascade-models-called"] == "small,large"
    assert raw.headers["x-cascade-escalation-reason"] == "low_score"
    sent = upstream.calls("up-small")[0].body
    assert sent["top_logprobs"] == TOP_K
    content = (chat_logprobs(sent, ok("Paris.", confidence=0.99)) or {})["content"]
    expected = score_logprobs(content, "escalation_benefit", TOP_K, benefit=BenefitSpec(**BENEFIT).model())
    assert expected is not None and expected < 0.2
    assert float(raw.headers["x-cascade-score"]) == pytest.approx(expected, rel=1e-5)


def test_the_section_scorer_still_scores_the_other_tiers(benefit_gateway, upstream) -> None:
    upstream.script("up-small", ok("Paris.", confidence=0.99))
    raw = benefit_gateway.client().chat.completions.with_raw_response.create(
        model="cascade/chain", messages=MESSAGES
    )
    assert raw.headers["x-cascade-models-called"] == "small"
    assert float(raw.headers["x-cascade-score"]) > 0.9  # mean negentropy of a 0.99-sure answer
