"""`cascade serve`: one-line errors for bad configs, and a real server process."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import httpx
import pytest
import yaml
from gateway_testkit import model_configs
from openai import OpenAI
from scripted_upstream import ok
from typer.testing import CliRunner

from cascade_cli.main import app

CASCADE = str(Path(sys.executable).with_name("cascade"))


@pytest.mark.parametrize(
    ("text", "fragment"),
    [
        ("models: {}\npolicy: p.json\n", "models"),
        ("models: {a: [\n", "not valid YAML"),
        ("models:\n  a: {base_url: 'http://x', model: m}\npolicy: absent.json\n", "does not exist"),
    ],
)
def test_bad_config_is_one_red_line_and_exit_2(tmp_path: Path, text: str, fragment: str) -> None:
    config = tmp_path / "gateway.yaml"
    config.write_text(text)
    result = CliRunner().invoke(app, ["serve", "--config", str(config)])
    assert result.exit_code == 2
    output = result.output.strip()
    assert fragment in output and "Traceback" not in output
    assert len(output.splitlines()) == 1


def test_missing_config_file_is_one_line(tmp_path: Path) -> None:
    result = CliRunner().invoke(app, ["serve", "--config", str(tmp_path / "nope.yaml")])
    assert result.exit_code == 2 and "cannot read config" in result.output


def test_serve_runs_the_gateway(tmp_path: Path, upstream, write_policy) -> None:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    policy = write_policy(tmp_path / "policy.json")
    config = tmp_path / "gateway.yaml"
    document = {"models": model_configs(upstream.base_url), "policy": policy.name, "auth": {"open": True}}
    config.write_text(yaml.safe_dump(document))
    env = {k: v for k, v in os.environ.items() if not k.startswith("CASCADE_")}
    process = subprocess.Popen(
        [CASCADE, "serve", "--config", str(config), "--port", str(port)],
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
    )
    try:
        url = f"http://127.0.0.1:{port}"
        end = time.monotonic() + 20
        while True:
            try:
                if httpx.get(url + "/healthz", timeout=1).status_code == 200:
                    break
            except httpx.TransportError:
                pass
            assert process.poll() is None, process.stdout.read().decode()
            assert time.monotonic() < end, "cascade serve did not come up"
            time.sleep(0.1)
        upstream.script("up-small", ok("Paris.", confidence=0.99))
        with OpenAI(base_url=url + "/v1", api_key="none", max_retries=0) as client:
            raw = client.chat.completions.with_raw_response.create(
                model="cascade", messages=[{"role": "user", "content": "Capital of France?"}]
            )
        assert raw.parse().choices[0].message.content == "Paris."
        assert raw.headers["x-cascade-model"] == "small"
    finally:
        process.send_signal(signal.SIGINT)
        assert process.wait(15) == 0
