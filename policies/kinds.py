"""A policy as it serves one request kind: its kind section, or the top level (docs/contracts.md#policy-file).

A policy's top level serves text requests and every kind without a section of its own; a section
(``Policy.kinds``) carries the routes, envelope, model statistics and optionally the scorer and
score distribution calibrated on that kind's rows. ``kind_policy`` returns the policy a request of
a kind is served by, shaped as a ``Policy`` whose top level is the section, so that the decision
rule (``policies.decision``), the engine and the budget index read it exactly as they read any
policy: one decision rule for every kind. ``tier_policy`` does the same for a tier with a scorer
of its own.
"""

from __future__ import annotations

from collections.abc import Iterator

from policies.schema import KindSection, Policy, Tier
from policies.tool_calls import REQUEST_KINDS, RequestKind

TOP_LEVEL_KIND: RequestKind = "text"


def kind_policy(policy: Policy, kind: str) -> Policy:
    """The policy serving requests of ``kind``: ``policy`` itself without a section for it.

    With a section, a ``Policy`` sharing the original's ``policy_id``, ``created_at``,
    ``on_missing_score`` and ``allow_degraded``, whose models, tiers, default tier, envelope,
    scorer (the section's, else the top level's), score distribution and router are the section's, and
    without ``kinds``. It is built without validation (the original was validated, section
    included) and is never saved or hashed: it is a way of reading the original.
    """
    section = (policy.kinds or {}).get(kind)  # type: ignore[call-overload]
    if section is None:
        return policy
    # Built once per (policy, kind) and kept by the policy: the view's own derived values (its
    # budget index) are then built once too.
    return policy.derived(("kind_view", kind), lambda: _section_view(policy, section))


def _section_view(policy: Policy, section: KindSection) -> Policy:
    return Policy.model_construct(
        schema_version=policy.schema_version,
        policy_id=policy.policy_id,
        created_at=policy.created_at,
        scorer=section.scorer or policy.scorer,
        models=section.models,
        default_tier=section.default_tier,
        tiers=section.tiers,
        envelope=section.envelope,
        on_missing_score=policy.on_missing_score,
        allow_degraded=policy.allow_degraded,
        score_distribution=section.score_distribution,
        kinds=None,
        router=section.router,
    )


def tier_policy(policy: Policy, tier: str) -> Policy:
    """The policy as it serves ``tier``: ``policy`` itself, unless the tier has a scorer of its own
    (``Tier.scorer``); then a copy whose scorer is the tier's, built once per (policy, tier), so
    that every reader of ``policy.scorer`` (stage bodies, scoring, learning) scores the tier's way."""
    found = policy.tiers.get(tier)
    if found is None or found.scorer is None:
        return policy
    own = found.scorer
    return policy.derived(("tier_view", tier), lambda: policy.model_copy(update={"scorer": own}))


def served_kinds(policy: Policy) -> list[str]:
    """``text`` then every kind with a section of its own, in ``REQUEST_KINDS`` order."""
    sections = policy.kinds or {}
    return [TOP_LEVEL_KIND, *(k for k in REQUEST_KINDS if k in sections)]


def kind_tiers(policy: Policy) -> Iterator[tuple[str, str, Tier]]:
    """``(kind, tier name, tier)`` of the top level (kind ``text``) and of every kind section."""
    for kind in served_kinds(policy):
        for name, tier in kind_policy(policy, kind).tiers.items():
            yield kind, name, tier
