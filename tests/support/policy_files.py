"""The test policy (``gateway_testkit.POLICY_DOCUMENT``) with changes, and as a policy file."""

from __future__ import annotations

import copy
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from policies import build_policy, save_policy
from tests.support.gateway_testkit import POLICY_DOCUMENT


def policy_document(
    tier_changes: Mapping[str, Mapping[str, Any]] | None = None, **changes: Any
) -> dict[str, Any]:
    """A copy of the test policy: ``changes`` replace top-level fields, ``tier_changes`` replace
    fields of the named tiers (e.g. ``{"balanced": {"routes": [...]}}``)."""
    document = copy.deepcopy(POLICY_DOCUMENT)
    document.update(copy.deepcopy(changes))
    document.pop("policy_id", None)
    for tier, fields in (tier_changes or {}).items():
        document["tiers"][tier].update(copy.deepcopy(dict(fields)))
    return document


def write_policy(
    path: Path, tier_changes: Mapping[str, Mapping[str, Any]] | None = None, **changes: Any
) -> Path:
    """Save ``policy_document(tier_changes, **changes)`` (built and stamped) to ``path``; ``path``."""
    save_policy(build_policy(policy_document(tier_changes, **changes)), path)
    return path
