"""`cascade models check` against a real llama-server (the pool's smallest model on a free port)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from localpool.demo_config import pool_gateway_config, write_gateway_config
from localpool.install import model_is_installed
from localpool.manifest import Manifest, load_manifest
from localpool.paths import PoolPaths
from localpool.pool import ServerOptions, server_command
from localpool.process import start_detached, stop, wait_healthy
from localpool.server_build import llama_server_binary
from tests.support.ports import free_port

pytestmark = pytest.mark.e2e

MODEL = "smollm2-135m"
CASCADE = str(Path(sys.executable).with_name("cascade"))


@pytest.fixture(scope="module")
def server(repo_root: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Manifest]:
    """llama-server with the pool's 135M model on a free port (installed by scripts/setup.sh)."""
    home = os.environ.get("CASCADE_HOME")
    paths = PoolPaths(Path(home) if home else repo_root / ".cascade")
    manifest = load_manifest()
    binary = llama_server_binary()
    if binary is None or not model_is_installed(manifest.models[MODEL], paths):
        pytest.fail(f"local pool not installed (llama-server: {binary}); run scripts/setup.sh")
    spec = manifest.models[MODEL].model_copy(update={"port": free_port()})
    run = tmp_path_factory.mktemp("pool")
    command = server_command(
        binary, paths.model_file(spec.file), MODEL, spec, ServerOptions.from_env(servers=1)
    )
    record = start_detached(command, run / "server.log", run / "server.pid", port=spec.port)
    try:
        wait_healthy(
            f"http://127.0.0.1:{spec.port}/health",
            pid=record.pid,
            log_path=run / "server.log",
            timeout_s=120,
            name=MODEL,
        )
        yield manifest.model_copy(update={"models": {**manifest.models, MODEL: spec}})
    finally:
        stop(record.pid, grace_s=10)


def test_llama_server_gives_what_the_demo_config_declares(server: Manifest, tmp_path: Path) -> None:
    config = pool_gateway_config(server, [MODEL], tmp_path / "policy.json")
    entry = config["models"][MODEL]
    # The same server under a wrong declaration and under a cap it honours.
    config["models"]["declared-without"] = {**entry, "capabilities": {"logprobs": False}}
    config["models"]["capped-3"] = {
        **entry,
        "capabilities": {"max_top_logprobs": 3, "logprobs_form": "integer"},
    }
    path = write_gateway_config(tmp_path / "gateway.yaml", config)
    env = {k: v for k, v in os.environ.items() if not k.startswith("CASCADE_")}
    done = subprocess.run(
        [CASCADE, "models", "check", "--config", str(path), "--json"],
        env=env,
        capture_output=True,
        timeout=180,
        check=False,
    )
    assert done.returncode == 1, done.stderr.decode()
    reports = {m["name"]: m for m in json.loads(done.stdout)["models"]}
    demo = reports[MODEL]
    assert (
        demo["agrees"] and demo["logprobs"] and demo["alternatives_min"] == demo["asked_alternatives"] == 20
    )
    assert demo["refused_logprobs"] is False and demo["latency_ms"] > 0 and demo["cost_usd"] > 0
    capped = reports["capped-3"]
    assert capped["agrees"] and capped["alternatives_max"] == 3  # `logprobs: 3` on chat: taken as a count
    assert reports["declared-without"]["disagreements"] == [
        "returns logprobs (20 alternatives per position) but is declared logprobs: false"
    ]
