"""Fixtures of the deploy tests: the scripted upstream and a real gateway app serving the example policy."""

from __future__ import annotations

import logging
import threading
import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import httpx
import pytest
import yaml
from deploy_support import DEPLOY

from tests.support.deploy_upstream import running_deploy_upstream
from tests.support.ports import free_port
from tests.support.shared_redis import REDIS_URL, delete_prefix


def wait_http(url: str, timeout_s: float = 20.0) -> None:
    """Wait until ``url`` answers 200, or fail."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        try:
            if httpx.get(url, timeout=1.0).status_code == 200:
                return
        except httpx.HTTPError:
            pass
        time.sleep(0.1)
    pytest.fail(f"{url} did not answer 200 within {timeout_s}s")


@pytest.fixture(scope="module")
def scripted_upstream_url() -> Iterator[str]:
    """deploy/tools/scripted_upstream.py on a free loopback port (a subprocess); its /v1 base URL."""
    with running_deploy_upstream() as url:
        yield url


@dataclass
class RunningGateway:
    """A gateway app served by uvicorn in a background thread."""

    url: str
    config_path: Path


@pytest.fixture(scope="module")
def example_gateway(
    scripted_upstream_url: str,
    tmp_path_factory: pytest.TempPathFactory,
) -> Iterator[RunningGateway]:
    """The shipped example config and policy (deploy/config/), upstreams pointed at the scripted
    upstream, shared state in the real Redis under a private key prefix, and learning turned on
    (every cascade request sampled into a file store) so that its metrics are exported too."""
    import uvicorn

    from gateway.api.app import create_app
    from gateway.config.settings import Settings

    prefix = f"cascade-deploy-test-{uuid.uuid4().hex[:10]}"
    monkeypatch = pytest.MonkeyPatch()
    monkeypatch.setenv("CASCADE_REDIS_PREFIX", prefix)
    for name in ("CASCADE_API_KEYS", "CASCADE_ADMIN_KEY"):
        monkeypatch.delenv(name, raising=False)
    document = yaml.safe_load((DEPLOY / "config" / "gateway.yaml").read_text())
    for model in document["models"].values():
        model["base_url"] = scripted_upstream_url
    document["policy"] = str(DEPLOY / "config" / "policy.json")
    document["redis_url"] = REDIS_URL
    work = tmp_path_factory.mktemp("deploy")
    document["learning"] = {
        "enabled": True,
        "sample_rate": 1.0,
        "judge": {"kind": "exact"},
        "store": (work / "traffic.jsonl").as_uri(),
        "flush_interval_s": 0.2,
    }
    config_path = work / "gateway.yaml"
    config_path.write_text(yaml.safe_dump(document))

    # The app configures the `cascade` logger (JSON handler, no propagation) for the whole process:
    # restore it afterwards so later tests in the session see logging as they left it.
    project_logger = logging.getLogger("cascade")
    saved_logger = (project_logger.level, project_logger.propagate, list(project_logger.handlers))

    port = free_port()
    app = create_app(Settings.from_yaml(config_path))
    server = uvicorn.Server(
        uvicorn.Config(app, host="127.0.0.1", port=port, log_level="warning", lifespan="on")
    )
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    try:
        wait_http(f"http://127.0.0.1:{port}/healthz")
        yield RunningGateway(f"http://127.0.0.1:{port}", config_path)
    finally:
        server.should_exit = True
        thread.join(timeout=15)
        project_logger.setLevel(saved_logger[0])
        project_logger.propagate = saved_logger[1]
        project_logger.handlers[:] = saved_logger[2]
        monkeypatch.undo()
        delete_prefix(prefix)
