"""The committed demo policy: valid, served by pool models only, tiers as documented."""

from __future__ import annotations

from pathlib import Path

from localpool.demo_config import pool_gateway_config
from localpool.manifest import load_manifest
from policies import load_policy


def test_demo_policy_uses_pool_models_and_has_the_three_tiers(repo_root: Path) -> None:
    policy = load_policy(repo_root / "policies" / "local-demo.json")
    manifest = load_manifest()
    assert set(policy.models) <= set(manifest.models) | set(manifest.members)
    assert set(policy.tiers) == {"economy", "balanced", "quality"} and policy.default_tier == "balanced"
    costs = [policy.tiers[t].expected.cost_usd for t in ("economy", "balanced", "quality")]
    assert costs == sorted(costs)


def test_generated_gateway_config_points_at_the_pool_ports_with_manifest_prices(tmp_path: Path) -> None:
    from gateway.config import Settings
    from localpool.demo_config import write_gateway_config

    manifest = load_manifest()
    names = ["smollm2-135m", "qwen2.5-coder-0.5b"]
    path = write_gateway_config(
        tmp_path / "g.yaml", pool_gateway_config(manifest, names, tmp_path / "p.json")
    )
    settings = Settings.from_yaml(path)
    assert settings.redis_url is None
    for name in names:
        model = settings.models[name]
        assert model.base_url == f"http://127.0.0.1:{manifest.models[name].port}/v1"
        assert model.model == name
        assert model.price.input_per_mtok == manifest.models[name].price.input_per_mtok
        assert model.capabilities.logprobs and model.capabilities.max_top_logprobs is None
    # The Qwen models write calls as JSON in their content (measured, docs/tool-calls.md): the
    # gateway returns them as tool_calls; the others are left native.
    assert settings.models["qwen2.5-coder-0.5b"].tool_calls == "content"
    assert settings.models["smollm2-135m"].tool_calls == "native"


def test_generated_config_gives_members_their_models_server_and_request_defaults(tmp_path: Path) -> None:
    from gateway.config import Settings
    from localpool.demo_config import write_gateway_config

    manifest = load_manifest()
    names = list(manifest.members)
    config = pool_gateway_config(manifest, names, tmp_path / "p.json")
    settings = Settings.from_yaml(write_gateway_config(tmp_path / "g.yaml", config))
    for name in names:
        member = manifest.members[name]
        model = settings.models[name]
        assert model.model == member.server
        assert model.base_url == f"http://127.0.0.1:{manifest.models[member.server].port}/v1"
        assert model.request_defaults == member.request_defaults
