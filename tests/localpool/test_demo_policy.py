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
    from gateway.config.settings import Settings
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
    assert settings.models["qwen2.5-coder-0.5b"].capabilities.tool_calls == "content"
    assert settings.models["smollm2-135m"].capabilities.tool_calls == "native"


def test_generated_config_gives_members_their_models_server_and_request_defaults(tmp_path: Path) -> None:
    from gateway.config.settings import Settings
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


def test_a_price_sheet_replaces_the_pool_prices_and_overruns_of_the_names_it_lists(tmp_path: Path) -> None:
    from gateway.config.settings import Settings
    from localpool.demo_config import write_gateway_config

    manifest = load_manifest()
    sheet = tmp_path / "prices.yaml"
    sheet.write_text(
        "models:\n  qwen0.5b-steps: {input_per_mtok: 0.15, output_per_mtok: 0.6, cancel_overrun_tokens: 3}\n"
    )
    names = ["qwen0.5b-steps", "qwen1.5b-steps"]
    config = pool_gateway_config(manifest, names, tmp_path / "p.json", prices=sheet)
    settings = Settings.from_yaml(write_gateway_config(tmp_path / "g.yaml", config))
    cheap, strong = settings.models["qwen0.5b-steps"], settings.models["qwen1.5b-steps"]
    assert cheap.price.output_per_mtok == 0.6 and cheap.cancel_overrun_tokens == 3
    pool_strong = manifest.models[manifest.server_of("qwen1.5b-steps")]
    assert strong.price == pool_strong.price
    assert strong.cancel_overrun_tokens == pool_strong.cancel_overrun_tokens


def test_the_served_policy_is_the_arithmetic_policy_with_the_tool_call_policy_as_its_section(
    repo_root: Path,
) -> None:
    from localpool.demo_policy import SERVED_POLICY, TEXT_POLICY, TOOLS_POLICY, compose

    text, tools = load_policy(repo_root / TEXT_POLICY), load_policy(repo_root / TOOLS_POLICY)
    served = load_policy(repo_root / SERVED_POLICY)
    assert compose(text, tools) == served  # committed = what `python -m localpool.demo_policy` writes
    assert served.tiers == text.tiers and served.scorer == text.scorer
    section = (served.kinds or {})["tool_call"]
    assert section.tiers == tools.tiers and section.scorer == tools.scorer and section.models == tools.models


def test_the_demo_coverage_takes_every_calibration_question_and_leaves_words_out(repo_root: Path) -> None:
    import json

    from gateway.config.coverage import CoverageConfig, covered
    from localpool.demo_cli import DEMO_COVERAGE, MULTI_STEP_QUESTION, QUICK_QUESTION

    coverage = CoverageConfig.model_validate(DEMO_COVERAGE)
    data = repo_root / "collection" / "data"
    prompts = [QUICK_QUESTION, MULTI_STEP_QUESTION]
    for name in ("arithmetic.jsonl", "arithmetic-quick.jsonl", "arithmetic-heldout.jsonl"):
        prompts += [json.loads(line)["prompt"] for line in (data / name).read_text().splitlines()]
    assert len(prompts) == 562
    for prompt in prompts:
        assert covered(coverage, {"messages": [{"role": "user", "content": prompt}]}, "text", {}), prompt
    for words in ("hello", "Explain what a hash table is in two sentences."):
        assert not covered(coverage, {"messages": [{"role": "user", "content": words}]}, "text", {})


def test_the_demo_config_sends_what_the_policy_does_not_cover_to_the_chat_member(
    repo_root: Path, tmp_path: Path
) -> None:
    from gateway.config.settings import Settings
    from localpool.demo_cli import DEFAULT_POLICY, DEMO_COVERAGE, read_policy, served_models
    from localpool.demo_config import write_gateway_config

    policy, names, _, heldout = read_policy(repo_root / DEFAULT_POLICY)
    assert heldout is not None and heldout["tiers"]  # the arithmetic policy's held-out table
    names = served_models(names, DEMO_COVERAGE)
    assert {"qwen1.5b-fast", "qwen1.5b-think", "qwen0.5b-tools", "qwen1.5b-tools", "qwen1.5b-chat"} <= set(
        names
    )
    config = pool_gateway_config(load_manifest(), names, policy, coverage=DEMO_COVERAGE)
    settings = Settings.from_yaml(write_gateway_config(tmp_path / "g.yaml", config))
    assert settings.coverage is not None and settings.coverage.otherwise == "qwen1.5b-chat"
    chat = settings.models["qwen1.5b-chat"]
    assert chat.request_defaults is not None and chat.request_defaults.system is None
    assert chat.request_defaults.completion_cap() == 512
    assert settings.models["qwen1.5b-tools"].capabilities.tool_calls == "content"
