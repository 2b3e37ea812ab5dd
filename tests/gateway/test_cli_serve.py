"""`cascade serve`: one-line errors for bad configs, and a real server process."""

from __future__ import annotations

import json
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
from openai import OpenAI
from typer.testing import CliRunner

from cascade_cli.main import app
from tests.support.gateway_testkit import model_configs
from tests.support.ports import free_port
from tests.support.scripted_upstream import ok

CASCADE = str(Path(sys.executable).with_name("cascade"))


@pytest.mark.parametrize(
    ("text", "fragment"),
    [
        ("models: {}\npolicy: p.json\n", "models"),
        ("models: {a: [\n", "not valid YAML"),
        (
            "models:\n  a: {base_url: 'http://x', model: m, price: {per_query_usd: 0}}\n"
            "policy: absent.json\n",
            "does not exist",
        ),
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


def _start_serve(tmp_path: Path, upstream, write_policy, **config: object) -> tuple[subprocess.Popen, str]:
    """`cascade serve` as a process on a free port (stderr piped); returns it and its base URL."""
    port = free_port()
    policy = write_policy(tmp_path / "policy.json")
    path = tmp_path / "gateway.yaml"
    document = {"models": model_configs(upstream.base_url), "policy": policy.name, "auth": {"open": True}}
    path.write_text(yaml.safe_dump({**document, **config}))
    env = {k: v for k, v in os.environ.items() if not k.startswith("CASCADE_")}
    process = subprocess.Popen(
        [CASCADE, "serve", "--config", str(path), "--port", str(port)],
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
    )
    url = f"http://127.0.0.1:{port}"
    end = time.monotonic() + 20
    while True:
        try:
            if httpx.get(url + "/healthz", timeout=1).status_code == 200:
                return process, url
        except httpx.TransportError:
            pass
        if process.poll() is not None:
            pytest.fail(process.stdout.read().decode())
        if time.monotonic() > end:
            process.kill()
            pytest.fail("cascade serve did not come up")
        time.sleep(0.1)


def _stop_serve(process: subprocess.Popen) -> list[str]:
    """SIGINT, wait for a clean exit, return its output lines."""
    process.send_signal(signal.SIGINT)
    try:
        assert process.wait(15) == 0
    finally:
        if process.poll() is None:
            process.kill()
    return process.stdout.read().decode().splitlines()


def test_serve_runs_the_gateway(tmp_path: Path, upstream, write_policy) -> None:
    process, url = _start_serve(tmp_path, upstream, write_policy)
    try:
        upstream.script("up-small", ok("Paris.", confidence=0.99))
        with OpenAI(base_url=url + "/v1", api_key="none", max_retries=0) as client:
            raw = client.chat.completions.with_raw_response.create(
                model="cascade", messages=[{"role": "user", "content": "Capital of France?"}]
            )
        assert raw.parse().choices[0].message.content == "Paris."
        assert raw.headers["x-cascade-model"] == "small"
    finally:
        _stop_serve(process)


def test_slow_request_headers_are_cut_off_and_every_log_line_is_json(
    tmp_path: Path, upstream, write_policy
) -> None:
    process, url = _start_serve(
        tmp_path, upstream, write_policy, limits={"header_timeout_s": 1.0}, logging={"level": "info"}
    )
    port = int(url.rsplit(":", 1)[1])
    try:
        # Slowloris: the request line, then one header byte every 0.2 s: the 301 bytes would take
        # a minute, each arriving well within the timeout. The server must answer and close while
        # they are still coming (the timeout is per request, not per byte).
        header = b"x-padding: " + b"a" * 290
        with socket.create_connection(("127.0.0.1", port), timeout=10) as slow:
            slow.sendall(b"POST /v1/chat/completions HTTP/1.1\r\n")
            sent, answer = 0, b""
            slow.setblocking(False)
            for byte in header:
                try:
                    slow.sendall(bytes([byte]))
                    sent += 1
                    answer += slow.recv(4096)  # the server's answer, once it has sent one
                except BlockingIOError:
                    pass  # nothing to read yet
                except OSError:
                    break  # the server closed the connection
                if answer:
                    break
                time.sleep(0.2)
            slow.setblocking(True)
            slow.settimeout(10)
            try:
                while chunk := slow.recv(4096):
                    answer += chunk
            except OSError:
                pass
        assert answer.startswith(b"HTTP/1.1 408"), answer
        assert b'"code": "request_timeout"' in answer
        assert sent < len(header)  # answered while the headers were still arriving
        # A connection that never sends anything is closed too.
        with socket.create_connection(("127.0.0.1", port), timeout=5) as idle:
            idle.settimeout(4)
            assert idle.recv(4096).startswith(b"HTTP/1.1 408")
        # A prompt request on the same server still works.
        assert httpx.get(url + "/healthz", timeout=5).status_code == 200
        # Something uvicorn itself logs (a malformed request line).
        with socket.create_connection(("127.0.0.1", port), timeout=5) as bad:
            bad.sendall(b"NOT HTTP AT ALL\r\n\r\n")
            answer = bad.recv(4096)
            assert answer.startswith(b"HTTP/1.1 400")
            assert json.loads(answer.split(b"\r\n\r\n", 1)[1])["error"]["code"] == "invalid_http_request"
    finally:
        lines = _stop_serve(process)
    assert lines, "cascade serve logged nothing"
    parsed = [json.loads(line) for line in lines]  # every line is a JSON object
    events = [entry["event"] for entry in parsed]
    assert "serving" in events and "gateway_started" in events
    assert any(
        entry.get("logger") == "uvicorn.error" and "Invalid HTTP request" in entry["event"]
        for entry in parsed
    )
    assert any("not complete within" in entry["event"] for entry in parsed)
