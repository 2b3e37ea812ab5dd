"""Turn a calibration (runs, envelope, solved tiers) into a policy file (docs/contracts.md#policy-file).

The document is validated and content-hashed by ``policies.store.build_policy``: this module
only assembles fields, it never computes ``policy_id`` itself.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

from calibration.envelope import Envelope
from calibration.heldout_expected import attach_heldout
from calibration.policy.score_distribution import score_distribution_document
from calibration.policy.shift_reference import shift_reference_document
from calibration.runs import RunsMatrix
from calibration.tiers import TierSolution
from policies.schema import Policy
from policies.store import build_policy, save_policy

# Top-K recorded for an external score: the gateway refuses such a policy anyway, the field is
# required by the schema.
_EXTERNAL_TOP_K = 1


def policy_document(
    matrix: RunsMatrix,
    envelope: Envelope,
    tiers: Mapping[str, TierSolution],
    default_tier: str,
    heldout: Mapping[str, dict[str, Any]] | None = None,
) -> dict[str, Any]:
    """The policy as a plain document (no ``policy_id`` / ``created_at`` yet).

    ``models`` lists every model of the runs with its mean cost and quality on the calibration
    rows (``envelope.model_cost`` / ``model_quality``) and, with a black-box scorer, the mean cost of
    scoring its answer (``scoring_cost_usd``, already in the tiers' and points' costs); ``scorer``
    carries the black-box scorer's settings; ``envelope`` holds every envelope point;
    ``score_distribution`` where the scored models' scores fell on those rows (when any tier
    scores a stage); ``heldout`` (``calibration.heldout_expected``) goes into the tiers' ``expected``.
    """
    scorer: dict[str, Any] = {
        "name": matrix.scorer,
        "top_k": matrix.top_k if matrix.top_k is not None else _EXTERNAL_TOP_K,
        **(matrix.scorer_settings or {}),
    }
    if matrix.score_tokens != "all":
        scorer["tokens"] = matrix.score_tokens
    models: dict[str, dict[str, float]] = {
        name: {"mean_cost_usd": float(cost), "quality": _unit(quality)}
        for name, cost, quality in zip(
            envelope.model_names, envelope.model_cost, envelope.model_quality, strict=True
        )
    }
    if matrix.scoring_cost is not None:  # a black-box scorer: what scoring each scorable model costs
        for j, name in enumerate(matrix.models):
            if name not in matrix.unscored and name in models:
                models[name]["scoring_cost_usd"] = float(matrix.scoring_cost[:, j].mean())
    tier_documents = {name: _tier_document(solution) for name, solution in tiers.items()}
    attach_heldout(tier_documents, heldout)
    points = [
        {
            "cost_usd": float(envelope.cost[i]),
            "quality": _unit(envelope.quality[i]),
            "models": list(envelope.models[i]),
            "thresholds": list(envelope.thresholds[i]),
            "escalation_rate": _unit(envelope.escalation_rate[i]),
        }
        for i in range(len(envelope))
    ]
    document: dict[str, Any] = {
        "schema_version": 1,
        "scorer": scorer,
        "models": models,
        "default_tier": default_tier,
        "tiers": tier_documents,
        "envelope": points,
    }
    distribution = score_distribution_document(matrix, tiers)
    if distribution is not None:
        document["score_distribution"] = distribution
    reference = shift_reference_document(matrix, tiers)  # the gateway's shift alarm
    if reference is not None:
        document["shift_reference"] = reference
    return document


def _tier_document(solution: TierSolution) -> dict[str, Any]:
    """One tier of the policy: its objective, routes, in-sample expectations and shadow price."""
    return {
        "objective": solution.objective.as_dict(),
        "routes": [
            {"weight": share.weight, "models": list(share.models), "thresholds": list(share.thresholds)}
            for share in solution.routes
        ],
        "expected": {
            "cost_usd": solution.cost,
            "quality": _unit(solution.quality),
            "escalation_rate": _unit(solution.escalation_rate),
        },
        "shadow_price": solution.shadow_price,
    }


def section_document(top: Mapping[str, Any], document: Mapping[str, Any]) -> dict[str, Any]:
    """A kind section (``Policy.kinds``) from that kind's policy ``document``: its models, tiers,
    envelope, score distribution and router, and its scorer only where it differs from the ``top``
    level's."""
    section = {key: document[key] for key in ("models", "default_tier", "tiers", "envelope")}
    if document["scorer"] != top["scorer"]:
        section["scorer"] = document["scorer"]
    for optional in ("score_distribution", "router"):
        if optional in document:
            section[optional] = document[optional]
    return section


def build_calibrated_policy(
    matrix: RunsMatrix,
    envelope: Envelope,
    tiers: Mapping[str, TierSolution],
    default_tier: str,
    heldout: Mapping[str, dict[str, Any]] | None = None,
) -> Policy:
    """Validated, stamped Policy (``policies.store.build_policy``)."""
    return build_policy(policy_document(matrix, envelope, tiers, default_tier, heldout))


def write_policy(policy: Policy, path: str | Path) -> Path:
    """Save atomically (``policies.store.save_policy``); returns the path."""
    save_policy(policy, path)
    return Path(path)


def _unit(value: float) -> float:
    # Means of values in [0, 1] can exceed the range by a float ulp after prefix sums.
    return min(1.0, max(0.0, float(value)))
