"""Declared model capabilities: the config, what is sent upstream, and the policies refused for them."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import httpx
import orjson
import pytest
import yaml
from typer.testing import CliRunner

from cascade_cli.main import app
from gateway.config.settings import ConfigError, Settings
from gateway.stages.bodies import upstream_body
from gateway.wire.requests import parse_request
from money.charges import DEFAULT_COMPLETION_BOUND
from policies import load_policy
from policies.capabilities import ModelCapabilities
from publishing import push_policy
from tests.support.gateway_testkit import RunningGateway, model_configs
from tests.support.policy_files import write_policy as write_policy_file
from tests.support.ports import free_port
from tests.support.scripted_upstream import ScriptedUpstream, ok
from tests.support.shared_redis import REDIS_URL

runner = CliRunner()
CASCADE = str(Path(sys.executable).with_name("cascade"))
MESSAGES = [{"role": "user", "content": "Capital of France?"}]


def models_with(base_url: str, **capabilities: dict[str, Any]) -> dict[str, Any]:
    """The test models, with ``capabilities`` declared for the named ones."""
    models = model_configs(base_url)
    for name, declared in capabilities.items():
        models[name]["capabilities"] = declared
    return models


def chat(**fields: Any) -> Any:
    return parse_request(orjson.dumps({"model": "cascade", "messages": MESSAGES, **fields}), "chat")


def sent(request: Any, capabilities: ModelCapabilities, top_k: int | None, stream: bool = False) -> dict:
    body = upstream_body(request, "up", top_k=top_k, stream=stream, capabilities=capabilities)
    return orjson.loads(body)


# ---------------------------------------------------------------- config


def test_capabilities_default_to_full_logprobs_and_parse_when_declared() -> None:
    settings = Settings.from_mapping(
        {
            "models": models_with(
                "http://127.0.0.1:1/v1",
                small={"logprobs": False},
                medium={"max_top_logprobs": 5, "logprobs_form": "integer"},
            ),
            "policy": "p.json",
        }
    )
    declared = settings.model_capabilities()
    assert declared["large"] == ModelCapabilities(logprobs=True, max_top_logprobs=None, logprobs_form="chat")
    assert declared["small"].logprobs is False
    assert declared["medium"].max_top_logprobs == 5 and declared["medium"].logprobs_form == "integer"


@pytest.mark.parametrize(
    ("declared", "fragment"),
    [
        ({"logprobs": False, "max_top_logprobs": 5}, "max_top_logprobs is set on a model declared without"),
        ({"logprob": False}, "capabilities.logprob"),  # a typo is an error, not ignored
        ({"logprobs_form": "int"}, "logprobs_form"),
        ({"max_top_logprobs": -1}, "max_top_logprobs"),
    ],
)
def test_bad_capabilities_are_one_line_config_errors(declared: dict[str, Any], fragment: str) -> None:
    document = {"models": models_with("http://127.0.0.1:1/v1", small=declared), "policy": "p.json"}
    with pytest.raises(ConfigError) as caught:
        Settings.from_mapping(document)
    message = str(caught.value)
    assert fragment in message and "models.small.capabilities" in message and "\n" not in message


# ---------------------------------------------------------------- what is sent upstream


def test_a_model_without_logprobs_is_sent_no_logprobs_field_even_when_the_client_asks() -> None:
    none = ModelCapabilities(logprobs=False)
    for top_k in (5, None):
        body = sent(chat(logprobs=True, top_logprobs=3), none, top_k)
        assert "logprobs" not in body and "top_logprobs" not in body
    legacy = parse_request(b'{"model": "cascade", "prompt": "x", "logprobs": 2}', "completions")
    assert "logprobs" not in sent(legacy, none, 5)


def test_scored_stages_ask_within_the_cap_and_in_the_models_form() -> None:
    assert sent(chat(), ModelCapabilities(max_top_logprobs=5), 15) == {
        "model": "up",
        "messages": MESSAGES,
        "logprobs": True,
        "top_logprobs": 5,
        "max_tokens": DEFAULT_COMPLETION_BOUND,  # the cap its reservation assumed
    }
    integer = sent(chat(), ModelCapabilities(logprobs_form="integer", max_top_logprobs=5), 15)
    assert integer["logprobs"] == 5 and "top_logprobs" not in integer
    assert sent(chat(), ModelCapabilities(logprobs_form="integer"), 15)["logprobs"] == 15
    legacy = parse_request(b'{"model": "cascade", "prompt": "x"}', "completions")
    assert sent(legacy, ModelCapabilities(max_top_logprobs=5, logprobs_form="integer"), 15)["logprobs"] == 5


def test_the_clients_own_logprobs_are_reshaped_only_when_the_model_needs_it() -> None:
    asked = chat(logprobs=True, top_logprobs=10)
    unchanged = sent(asked, ModelCapabilities(), None, stream=True)
    assert unchanged["logprobs"] is True and unchanged["top_logprobs"] == 10
    assert sent(asked, ModelCapabilities(max_top_logprobs=4), None)["top_logprobs"] == 4
    integer = sent(asked, ModelCapabilities(logprobs_form="integer"), None)
    assert integer["logprobs"] == 10 and "top_logprobs" not in integer
    # Not asked: nothing added, whatever the form.
    assert "logprobs" not in sent(chat(), ModelCapabilities(logprobs_form="integer"), None)
    assert sent(chat(logprobs=False), ModelCapabilities(logprobs_form="integer"), None)["logprobs"] is False


def test_live_requests_respect_the_declared_capabilities(
    upstream: ScriptedUpstream,
    make_settings: Callable[..., Any],
    start_gateway: Callable[..., RunningGateway],
    write_policy: Callable[..., Path],
) -> None:
    # small: integer form capped at 3, scored by a chosen-token scorer (reads no alternatives, so
    # the cap does not refuse it); large: no logprobs, the final stage the client asks logprobs of.
    settings = make_settings(
        policy=write_policy(scorer={"name": "min_probability", "top_k": 5}),
        models=models_with(
            upstream.base_url,
            small={"max_top_logprobs": 3, "logprobs_form": "integer"},
            large={"logprobs": False},
        ),
    )
    gateway = start_gateway(settings)
    upstream.script("up-small", ok("Maybe Lyon.", confidence=0.2))
    upstream.script("up-large", ok("Paris.", confidence=0.99))
    with gateway.client() as client:
        raw = client.chat.completions.with_raw_response.create(
            model="cascade", messages=MESSAGES, logprobs=True, top_logprobs=2
        )
    assert raw.headers["x-cascade-models-called"] == "small,large"
    small, large = upstream.calls("up-small")[0].body, upstream.calls("up-large")[0].body
    assert small["logprobs"] == 3 and "top_logprobs" not in small
    assert "logprobs" not in large and "top_logprobs" not in large
    assert raw.parse().choices[0].message.content == "Paris."


# ---------------------------------------------------------------- refusals


def _config(tmp_path: Path, base_url: str, policy: Path, **capabilities: dict[str, Any]) -> Path:
    path = tmp_path / "gateway.yaml"
    document = {
        "models": models_with(base_url, **capabilities),
        "policy": str(policy),
        "auth": {"open": True},
    }
    path.write_text(yaml.safe_dump(document))
    return path


def test_serve_refuses_a_policy_scoring_a_model_declared_without_logprobs(tmp_path: Path) -> None:
    policy = write_policy_file(tmp_path / "policy.json")  # balanced: small -> large, small scored
    config = _config(tmp_path, "http://127.0.0.1:9/v1", policy, small={"logprobs": False})
    result = runner.invoke(app, ["serve", "--config", str(config)])
    assert result.exit_code == 2
    output = result.output.strip()
    assert len(output.splitlines()) == 1 and "Traceback" not in output
    assert "tier 'balanced' route 1 (small -> large): model small is declared without logprobs" in output
    assert "scorer mean_token_negentropy" in output and "(+" in output  # the other routes scoring small


def test_serve_refuses_top_k_above_the_models_cap_but_not_a_final_stage_without_logprobs(
    tmp_path: Path,
) -> None:
    policy = write_policy_file(tmp_path / "policy.json", scorer={"name": "probability_margin", "top_k": 8})
    config = _config(tmp_path, "http://127.0.0.1:9/v1", policy, medium={"max_top_logprobs": 5})
    result = runner.invoke(app, ["serve", "--config", str(config)])
    assert result.exit_code == 2
    assert (
        "tier 'chain' route 1 (small -> medium -> large): scorer probability_margin reads top_k 8 "
        "alternatives per position and model medium gives at most 5"
    ) in result.output
    # large is last in every route: it is never scored, so declaring it without logprobs is fine.
    from gateway.commands.cli import unscorable_policy

    fine = _config(tmp_path, "http://127.0.0.1:9/v1", policy, large={"logprobs": False})
    assert unscorable_policy(Settings.from_yaml(fine)) is None


def test_push_refuses_a_policy_scoring_a_model_declared_without_logprobs(
    tmp_path: Path, keys: Any, sync_redis: Any
) -> None:
    policy = write_policy_file(tmp_path / "policy.json")
    config = _config(tmp_path, "http://127.0.0.1:9/v1", policy, small={"logprobs": False})
    args = [
        "policy",
        "push",
        str(policy),
        "--config",
        str(config),
        "--redis",
        REDIS_URL,
        "--prefix",
        keys.prefix,
    ]
    result = runner.invoke(app, args)
    assert result.exit_code == 1
    line = result.output.strip()
    assert len(line.splitlines()) == 1 and line.startswith("error:")
    assert "tier 'balanced' route 1 (small -> large): model small is declared without logprobs" in line
    assert sync_redis.get(keys.policy_current) is None and sync_redis.get(keys.policy_version) is None
    # The same config with small able to give logprobs: pushed.
    allowed = _config(tmp_path, "http://127.0.0.1:9/v1", policy)
    args[args.index(str(config))] = str(allowed)
    assert runner.invoke(app, args).exit_code == 0
    assert json.loads(sync_redis.get(keys.policy_current))["policy_id"] == load_policy(policy).policy_id


def _until(condition: Callable[[], bool], timeout_s: float = 5.0) -> bool:
    end = time.monotonic() + timeout_s
    while not condition():
        if time.monotonic() > end:
            return False
        time.sleep(0.02)
    return True


def test_a_hot_reloaded_file_policy_needing_more_is_refused_and_counted(
    upstream: ScriptedUpstream,
    make_settings: Callable[..., Any],
    start_gateway: Callable[..., RunningGateway],
    write_policy: Callable[..., Path],
) -> None:
    path = write_policy()  # top_k 5: within small's and medium's cap
    settings = make_settings(
        policy=path,
        models=models_with(upstream.base_url, small={"max_top_logprobs": 5}, medium={"max_top_logprobs": 5}),
    )
    gateway = start_gateway(settings)
    good_id = gateway.gateway.policy.policy_id
    write_policy(path, scorer={"name": "mean_token_negentropy", "top_k": 10})
    assert _until(lambda: gateway.sample("cascade_policy_reload_failures_total") >= 1)
    ready = gateway.readiness().json()
    assert ready["policy_id"] == good_id
    assert "model small gives at most 5 (capabilities.max_top_logprobs)" in ready["policy_last_error"]
    with gateway.client() as client:
        raw = client.chat.completions.with_raw_response.create(model="cascade", messages=MESSAGES)
    assert raw.headers["x-cascade-policy"] == good_id
    assert upstream.calls("up-small")[-1].body["top_logprobs"] == 5


def test_a_redis_policy_scoring_a_model_without_logprobs_is_refused_by_the_replica(
    tmp_path: Path,
    keys: Any,
    sync_redis: Any,
    upstream: ScriptedUpstream,
    make_settings: Callable[..., Any],
    start_gateway: Callable[..., RunningGateway],
) -> None:
    # Pushed without --config (nothing checked at push): the replica itself refuses it.
    push_policy(sync_redis, load_policy(write_policy_file(tmp_path / "policy.json")), keys)
    settings = make_settings(
        policy=REDIS_URL, models=models_with(upstream.base_url, small={"logprobs": False})
    )
    gateway = start_gateway(settings)
    assert _until(lambda: gateway.sample("cascade_policy_reload_failures_total") >= 1)
    ready = gateway.readiness()
    assert ready.json()["policy_id"] is None
    assert "model small is declared without logprobs" in ready.json()["policy_last_error"]


# ---------------------------------------------------------------- the startup probe


def _probe_config(tmp_path: Path, upstream: ScriptedUpstream) -> Path:
    policy = write_policy_file(tmp_path / "policy.json")
    path = tmp_path / "gateway.yaml"
    document = {
        "models": models_with(upstream.base_url, large={"logprobs": False}),
        "policy": str(policy),
        "auth": {"open": True},
        "probe_capabilities": True,
    }
    path.write_text(yaml.safe_dump(document))
    return path


def test_serve_with_the_probe_refuses_a_model_that_disagrees_with_its_declaration(
    tmp_path: Path, upstream: ScriptedUpstream
) -> None:
    upstream.set_default("up-small", ok("Paris.", confidence=None))  # declared with logprobs, gives none
    upstream.set_default("up-large", ok("Paris.", confidence=None))  # declared without: agrees
    result = runner.invoke(app, ["serve", "--config", str(_probe_config(tmp_path, upstream))])
    assert result.exit_code == 2
    last = result.output.strip().splitlines()[-1]
    assert last.endswith(
        "probe_capabilities: model small: returned no logprobs; declare logprobs: false; "
        "see `cascade models check`"
    )
    assert {c.model for c in upstream.calls()} == {"up-small", "up-medium", "up-large"}  # one call each


def test_serve_with_the_probe_starts_when_every_declaration_holds(
    tmp_path: Path, upstream: ScriptedUpstream
) -> None:
    upstream.set_default("up-large", ok("Paris.", confidence=None))
    config = _probe_config(tmp_path, upstream)
    port = free_port()
    env = {k: v for k, v in os.environ.items() if not k.startswith("CASCADE_")}
    process = subprocess.Popen(
        [CASCADE, "serve", "--config", str(config), "--port", str(port)],
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
    )
    try:
        assert _until(lambda: _healthy(port) or process.poll() is not None, 30)
        assert process.poll() is None, process.stdout.read().decode() if process.stdout else ""
    finally:
        process.send_signal(signal.SIGINT)
        process.wait(15)
    lines = (
        [json.loads(line) for line in process.stdout.read().decode().splitlines()] if process.stdout else []
    )
    probed = next(line for line in lines if line["event"] == "capabilities_probed")
    assert probed["agree"] is True and probed["models"] == 3 and probed["cost_usd"] > 0


def _healthy(port: int) -> bool:
    try:
        return httpx.get(f"http://127.0.0.1:{port}/healthz", timeout=1).status_code == 200
    except httpx.TransportError:
        return False
