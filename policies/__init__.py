"""The contract shared by calibration and the gateway: policy schema, scorers, decision rule.

Beside them, what both sides must measure the same way: request kinds and tool calls, a pool
member's request defaults, the answer checks and cut answers that escalate before any score. Money
(prices, usage, charges) is ``money``; a policy's push to Redis is ``publishing``.

Imports neither FastAPI nor pandas; the contracts are written out in docs/contracts.md.

The face: the names in ``__all__`` below, imported from ``policies`` itself. They are a policy
file and what reads it: the schema (``Policy``, ``Tier``, ``Route``, ``ScorerSpec``,
``EnvelopePoint``, ``ModelStats``, ``Expected``, ``Objective``, ``SCHEMA_VERSION``), loading,
checking and writing one (``load_policy``, ``parse_policy``, ``build_policy``, ``dump_policy``,
``save_policy``, ``compute_policy_id``, ``check_content_hash``, ``policy_json_schema``), the
decision rule (``choose_for_tier``, ``choose_for_budget``, ``draw_route``, ``tier_for``,
``should_escalate``, ``RouteChoice``), the scorers (``SCORERS``, ``score_logprobs``,
``score_response``) and the errors (``PolicyError``, ``PolicyInvalidError``, ``UnknownScorerError``,
``UnknownTierError``).

Everything else is imported from its own module, by name (``policies.kinds``, ``policies.commit``,
``policies.truncation``, ``policies.request_defaults``, ``policies.tool_calls``,
``policies.answer_checks``, ``policies.route_features``, ``policies.router``,
``policies.response_decision``, ...): each is one contract that only some of the packages read,
and a schema class that is not a policy file's top (``KindSection``, ``CommitRule``) is reached
through the module that defines it. A face name may also be imported from the module that
defines it (much of the code does); both spellings name the same object.
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
    UnknownScorerError,
    UnknownTierError,
)
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
    "policy_json_schema",
    "save_policy",
    "score_logprobs",
    "score_response",
    "should_escalate",
    "tier_for",
]
