"""`cascade models check` against the scripted upstream: what each model really returns about logprobs."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import yaml
from typer.testing import CliRunner

from cascade_cli.main import app
from tests.support.scripted_upstream import Reply, ScriptedUpstream, error

CASCADE = str(Path(sys.executable).with_name("cascade"))
runner = CliRunner()

# Upstream model id -> how it answers (each model's default reply: a retry gets the same behaviour).
BEHAVIOURS: dict[str, Reply] = {
    "up-full": Reply(content="Paris"),
    "up-none": Reply(content="Paris", confidence=None),
    "up-capped": Reply(content="Paris", max_alternatives=5),
    "up-refuses": Reply(content="Paris", refuse_logprobs=True),
    "up-broken": error(500),
}


def write_config(
    tmp_path: Path,
    upstream: ScriptedUpstream,
    models: dict[str, tuple[str, dict]],
    behaviours: dict[str, Reply] | None = None,
) -> Path:
    """A gateway config of ``{name: (upstream id, capabilities)}``; the upstream's behaviours set
    (``BEHAVIOURS`` and ``behaviours``)."""
    for model_id, reply in {**BEHAVIOURS, **(behaviours or {})}.items():
        upstream.set_default(model_id, reply)
    document: dict[str, Any] = {
        "models": {
            name: {
                "base_url": upstream.base_url,
                "model": model_id,
                "timeout_s": 5,
                "max_retries": 0,
                "price": {"input_per_mtok": 1.0, "output_per_mtok": 2.0},
                "capabilities": capabilities,
            }
            for name, (model_id, capabilities) in models.items()
        },
        "policy": "unused.json",
    }
    path = tmp_path / "gateway.yaml"
    path.write_text(yaml.safe_dump(document))
    return path


def check(config: Path, *args: str) -> tuple[int, dict[str, dict[str, Any]]]:
    result = runner.invoke(app, ["models", "check", "--config", str(config), "--json", *args])
    document = json.loads(result.stdout)
    return result.exit_code, {m["name"]: m for m in document["models"]}


def test_declarations_that_match_what_the_models_return_agree(
    tmp_path: Path, upstream: ScriptedUpstream
) -> None:
    config = write_config(
        tmp_path,
        upstream,
        {
            "full": ("up-full", {}),
            "none": ("up-none", {"logprobs": False}),
            "capped": ("up-capped", {"max_top_logprobs": 5}),
            "refuses": ("up-refuses", {"logprobs": False}),
            "integer": ("up-full", {"logprobs_form": "integer", "max_top_logprobs": 8}),
        },
    )
    code, reports = check(config)
    assert code == 0, reports
    assert all(r["agrees"] and r["reachable"] for r in reports.values())
    full = reports["full"]
    assert full["logprobs"] is True and full["alternatives_max"] == full["asked_alternatives"] == 20
    assert full["latency_ms"] > 0 and full["cost_usd"] > 0  # every call is charged
    assert reports["none"]["logprobs"] is False and reports["none"]["refused_logprobs"] is False
    assert reports["capped"]["alternatives_max"] == 5 and reports["capped"]["asked_alternatives"] == 5
    assert reports["refuses"]["refused_logprobs"] is True and reports["refuses"]["logprobs"] is False
    assert reports["integer"]["alternatives_max"] == 8
    # What was sent: each model asked in its declared form and cap; the refusing one asked again without.
    sent = {
        (c.model, json.dumps(c.body.get("logprobs")), c.body.get("top_logprobs")) for c in upstream.calls()
    }
    assert ("up-full", "true", 20) in sent and ("up-full", "8", None) in sent
    assert ("up-capped", "true", 5) in sent
    assert [c.body.get("logprobs") for c in upstream.calls("up-refuses")] == [True, None]


def test_each_way_a_declaration_can_be_wrong_is_reported_and_exits_1(
    tmp_path: Path, upstream: ScriptedUpstream
) -> None:
    config = write_config(
        tmp_path,
        upstream,
        {
            "none": ("up-none", {}),
            "capped": ("up-capped", {}),
            "refuses": ("up-refuses", {}),
            "understated": ("up-full", {"logprobs": False}),
            "broken": ("up-broken", {}),
        },
    )
    code, reports = check(config)
    assert code == 1
    assert not any(r["agrees"] for r in reports.values())
    assert reports["none"]["disagreements"] == ["returned no logprobs; declare logprobs: false"]
    assert reports["capped"]["disagreements"] == [
        "gave 5 alternatives per position of the 20 asked; declare max_top_logprobs: 5"
    ]
    assert reports["refuses"]["refused_logprobs"] is True and reports["refuses"]["reachable"] is True
    assert reports["refuses"]["disagreements"][0].startswith(
        "refused the logprobs fields (HTTP 400: logprobs are not supported with this model); declare"
    )
    assert reports["understated"]["disagreements"] == [
        "returns logprobs (20 alternatives per position) but is declared logprobs: false"
    ]
    assert reports["broken"]["reachable"] is False and reports["broken"]["error"].startswith("HTTP 500")


def test_the_table_names_each_model_and_every_disagreement(
    tmp_path: Path, upstream: ScriptedUpstream
) -> None:
    config = write_config(tmp_path, upstream, {"full": ("up-full", {}), "capped": ("up-capped", {})})
    result = runner.invoke(app, ["models", "check", "--config", str(config), "--top-k", "10"])
    assert result.exit_code == 1
    lines = result.stdout.splitlines()
    full = next(line for line in lines if "│ full " in line)
    assert "10/10" in full and full.rstrip("│ ").endswith("yes")
    capped = next(line for line in lines if "│ capped " in line)
    assert "5/10" in capped and "NO" in capped
    assert (
        lines[-1]
        == "model capped: gave 5 alternatives per position of the 10 asked; declare max_top_logprobs: 5"
    )


def test_one_model_can_be_checked_and_an_unknown_one_is_a_config_error(
    tmp_path: Path, upstream: ScriptedUpstream
) -> None:
    config = write_config(tmp_path, upstream, {"full": ("up-full", {}), "broken": ("up-broken", {})})
    code, reports = check(config, "--model", "full")
    assert code == 0 and list(reports) == ["full"]
    assert {c.model for c in upstream.calls()} == {"up-full"}
    result = runner.invoke(app, ["models", "check", "--config", str(config), "--model", "nope"])
    assert result.exit_code == 2 and "no model nope (configured: broken, full)" in result.output


def test_the_cascade_command_checks_a_config_as_a_process(tmp_path: Path, upstream: ScriptedUpstream) -> None:
    config = write_config(tmp_path, upstream, {"none": ("up-none", {}), "full": ("up-full", {})})
    env = {k: v for k, v in os.environ.items() if not k.startswith("CASCADE_")}
    done = subprocess.run(
        [CASCADE, "models", "check", "--config", str(config), "--json"],
        env=env,
        capture_output=True,
        timeout=60,
        check=False,
    )
    assert done.returncode == 1, done.stderr
    document = json.loads(done.stdout)
    assert document["agree"] is False
    assert {m["name"]: m["agrees"] for m in document["models"]} == {"none": False, "full": True}


def test_logprobs_in_the_legacy_shape_on_chat_are_read(tmp_path: Path, upstream: ScriptedUpstream) -> None:
    # A provider taking `logprobs: K` on chat may answer with the parallel lists of /v1/completions.
    legacy = {
        "tokens": ["Par", "is"],
        "token_logprobs": [-0.1, -0.01],
        "top_logprobs": [{"Par": -0.1, "Lon": -2.5, "Ber": -3.0}, {"is": -0.01, "ia": -5.0, "ix": -6.0}],
    }
    reply = Reply(
        body={
            "choices": [
                {"index": 0, "message": {"role": "assistant", "content": "Paris"}, "logprobs": legacy}
            ],
            "usage": {"prompt_tokens": 12, "completion_tokens": 2},
        }
    )
    declared = {"logprobs_form": "integer", "max_top_logprobs": 3}
    config = write_config(tmp_path, upstream, {"legacy": ("up-legacy", declared)}, {"up-legacy": reply})
    code, reports = check(config)
    assert code == 0 and reports["legacy"]["logprobs"] is True
    assert reports["legacy"]["alternatives_max"] == 3 and reports["legacy"]["asked_alternatives"] == 3
    assert upstream.calls("up-legacy")[0].body["logprobs"] == 3


def test_an_upstream_error_that_splits_the_key_is_redacted_in_the_report() -> None:
    from gateway.upstream.models_check import _error_text
    from redaction import Redactor

    key = "sk-probe-0123456789abcdef"
    for split in (key[:9] + "\n" + key[9:], key[:4] + "\\n" + key[4:], key[:6] + "\r\n\t" + key[6:]):
        raw = json.dumps({"error": {"message": f"bad key {split} here"}}).encode()
        text = _error_text(401, raw, Redactor([key]))
        assert text == "HTTP 401: bad key *** here", text
        raw_text = f"<html>bad key {split} here</html>".encode()
        assert key[9:] not in _error_text(401, raw_text, Redactor([key]))
