"""`cascade models check` against a real llama-server (the pool's smallest model on a free port)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from localpool.demo_config import pool_gateway_config, write_gateway_config
from localpool.manifest import Manifest
from tests.support.local_pool import LocalPool

pytestmark = pytest.mark.e2e

MODEL = "smollm2-135m"
CASCADE = str(Path(sys.executable).with_name("cascade"))


@pytest.fixture(scope="module")
def server(local_pool: LocalPool) -> Manifest:
    """The pool manifest with the 135M model's server running (the session's pool, a free port)."""
    return local_pool.serve([MODEL])


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
