"""The contract shared by calibration and the gateway: policy schema, scorers, decision rule, prices.

Imports neither FastAPI nor pandas; the contracts are written out in docs/contracts.md.
"""

from policies.decision import (
    RouteChoice,
    choose_for_budget,
    choose_for_tier,
    draw_route,
    should_escalate,
    tier_for,
)
from policies.errors import (
    PolicyError,
    PolicyInvalidError,
    PriceError,
    UnknownScorerError,
    UnknownTierError,
)
from policies.prices import Price, parse_price
from policies.schema import (
    SCHEMA_VERSION,
    EnvelopePoint,
    Expected,
    ModelStats,
    Objective,
    Policy,
    Route,
    ScorerSpec,
    Tier,
)
from policies.scorers import SCORERS, score_logprobs, score_response
from policies.store import (
    build_policy,
    check_content_hash,
    compute_policy_id,
    dump_policy,
    load_policy,
    parse_policy,
    policy_json_schema,
    save_policy,
)

__all__ = [
    "SCHEMA_VERSION",
    "SCORERS",
    "EnvelopePoint",
    "Expected",
    "ModelStats",
    "Objective",
    "Policy",
    "PolicyError",
    "PolicyInvalidError",
    "Price",
    "PriceError",
    "Route",
    "RouteChoice",
    "ScorerSpec",
    "Tier",
    "UnknownScorerError",
    "UnknownTierError",
    "build_policy",
    "check_content_hash",
    "choose_for_budget",
    "choose_for_tier",
    "compute_policy_id",
    "draw_route",
    "dump_policy",
    "load_policy",
    "parse_policy",
    "parse_price",
    "policy_json_schema",
    "save_policy",
    "score_logprobs",
    "score_response",
    "should_escalate",
    "tier_for",
]
