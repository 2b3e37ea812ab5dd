"""The committed BFCL tool policy: served by its gateway config, asking what the pool members ask."""

from __future__ import annotations

from pathlib import Path

from gateway.config.settings import Settings
from localpool.manifest import load_manifest
from policies import load_policy


def test_tool_policy_models_are_served_by_the_bfcl_gateway_config_with_the_members_prompts(
    repo_root: Path,
) -> None:
    settings = Settings.from_yaml(repo_root / "data" / "local" / "bfcl-gateway.yaml")
    policy = load_policy(settings.policy)
    manifest = load_manifest()
    assert set(policy.models) <= set(settings.models)
    for name, model in settings.models.items():
        assert model.capabilities.tool_calls == "content", name
        if name in manifest.members:
            member = manifest.members[name]
            assert model.model == member.server
            assert model.request_defaults == member.request_defaults
    # The tools members are what the calibrated routes escalate to.
    assert {"qwen0.5b-tools", "qwen1.5b-tools"} <= set(policy.models)


def test_tool_policy_tiers_carry_held_out_expectations_in_cost_order(repo_root: Path) -> None:
    policy = load_policy(repo_root / "policies" / "local-tools.json")
    assert set(policy.tiers) == {"economy", "balanced", "quality"} and policy.default_tier == "balanced"
    costs = [policy.tiers[t].expected.cost_usd for t in ("economy", "balanced", "quality")]
    assert costs == sorted(costs)
    for name, tier in policy.tiers.items():
        heldout = tier.expected.heldout
        assert heldout is not None and heldout.splits == 50, name
        assert heldout.quality.low <= heldout.quality.mean <= heldout.quality.high, name
