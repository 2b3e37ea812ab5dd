"""The gateway image, built with podman (deploy/image/build.sh) and run for real.

The container runs read-only as uid 10001 on the host network, with the example config and policy
mounted, in front of the scripted upstream on a free loopback port and sharing state through the
real Redis under a private key prefix. The checks: /healthz, /readyz, /metrics (parsed with
prometheus_client), one cascade request through the official OpenAI SDK with its x-cascade-*
headers, the image's own health check, the process's uid on the host, a read-only root, a lean
install (only core + gateway), and the image size. The container is removed even when a check fails.

Building needs root and apt (or podman already installed). Where that is missing the test fails in
CI (CI set) and is skipped, with the reason, elsewhere.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import shutil
import subprocess
import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import httpx
import openai
import pytest
import redis
import yaml
from deploy_support import DEPLOY, REPO, scrape_families

from tests.support.ports import free_port
from tests.support.shared_redis import REDIS_URL

pytestmark = pytest.mark.image

MAX_IMAGE_BYTES = 300 * 1000 * 1000  # the size podman reports (decimal MB, like `podman images`)
BUILD_TIMEOUT_S = 20 * 60
CALIBRATION_ONLY = ("pandas", "pyarrow", "scipy", "sklearn", "matplotlib", "optuna")


@dataclass
class BuiltImage:
    """What deploy/image/build.sh reported on its last line."""

    tag: str
    size_bytes: int
    build_s: int


def _podman(*args: str, timeout: float = 60, check: bool = True) -> subprocess.CompletedProcess[str]:
    return subprocess.run(["podman", *args], capture_output=True, text=True, timeout=timeout, check=check)


def _cannot_build_reason() -> str | None:
    """Why images cannot be built here, or None if they can."""
    if shutil.which("podman") and shutil.which("debootstrap"):
        return None if os.geteuid() == 0 else "podman builds here need root (rootful podman, debootstrap)"
    if os.geteuid() != 0:
        return "podman and debootstrap are not installed, and installing them needs root"
    if not shutil.which("apt-get"):
        return "podman and debootstrap are not installed, and there is no apt-get to install them"
    return None


@pytest.fixture(scope="module")
def gateway_image() -> BuiltImage:
    """The `gateway` target built (or found cached) by deploy/image/build.sh."""
    reason = _cannot_build_reason()
    if reason:
        message = f"cannot build the container image: {reason} (deploy/image/build.sh)"
        if os.environ.get("CI"):
            pytest.fail(message, pytrace=False)
        pytest.skip(message)
    # A tag of this checkout's own: several checkouts on one host may build at the same time.
    tag = f"localhost/cascade-gateway:test-{hashlib.sha256(str(REPO).encode()).hexdigest()[:10]}"
    result = subprocess.run(
        ["bash", str(DEPLOY / "image" / "build.sh"), "gateway"],
        capture_output=True,
        text=True,
        timeout=BUILD_TIMEOUT_S,
        env={**os.environ, "IMAGE_TAG": tag},
    )
    assert result.returncode == 0, f"deploy/image/build.sh failed:\n{result.stderr[-6000:]}"
    match = re.fullmatch(r"image (\S+) (\d+) built in (\d+)s", result.stdout.strip().splitlines()[-1])
    assert match, result.stdout
    return BuiltImage(match[1], int(match[2]), int(match[3]))


@dataclass
class RunningContainer:
    """A started gateway container and how to reach it."""

    name: str
    url: str
    port: int
    admin_key: str


@pytest.fixture(scope="module")
def gateway_container(
    gateway_image: BuiltImage, scripted_upstream_url: str, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[RunningContainer]:
    """The image run read-only, as its own user, on a free loopback port (host network)."""
    document = yaml.safe_load((DEPLOY / "config" / "gateway.yaml").read_text())
    for model in document["models"].values():
        model["base_url"] = scripted_upstream_url
    config = tmp_path_factory.mktemp("image") / "gateway.yaml"
    config.write_text(yaml.safe_dump(document))
    config.chmod(0o644)  # read by uid 10001 inside
    port = free_port()
    name = f"cascade-image-test-{uuid.uuid4().hex[:10]}"
    prefix = f"cascade-image-test-{uuid.uuid4().hex[:10]}"
    admin_key = f"admin-{uuid.uuid4().hex}"  # /readyz shows its details to the admin only
    # The image's own health command, pointed at the port this run listens on.
    health = json.loads(
        _podman("image", "inspect", "--format", "{{json .Config.Healthcheck.Test}}", gateway_image.tag).stdout
    )
    assert health[0] == "CMD" and ":8080/healthz" in health[-1]
    health_cmd = json.dumps([*health[1:-1], health[-1].replace(":8080/", f":{port}/")])
    try:
        _podman(
            "run",
            "-d",
            "--name",
            name,
            "--network=host",
            "--read-only",
            "-v",
            f"{config}:/etc/cascade/gateway.yaml:ro",
            "-v",
            f"{DEPLOY / 'config' / 'policy.json'}:/etc/cascade/policy.json:ro",
            "-e",
            f"CASCADE_REDIS_URL={REDIS_URL}",
            "-e",
            f"CASCADE_REDIS_PREFIX={prefix}",
            "-e",
            f"CASCADE_ADMIN_KEY={admin_key}",
            "--health-cmd",
            health_cmd,
            gateway_image.tag,
            "serve",
            "--config",
            "/etc/cascade/gateway.yaml",
            "--host",
            "127.0.0.1",
            "--port",
            str(port),
        )
        yield RunningContainer(name, f"http://127.0.0.1:{port}", port, admin_key)
    finally:
        logs = _podman("logs", name, check=False)
        print(f"--- podman logs {name} ---\n{logs.stdout[-4000:]}{logs.stderr[-4000:]}")
        _podman("rm", "-f", "-t", "5", name, check=False)
        client = redis.Redis.from_url(REDIS_URL)
        doomed = list(client.scan_iter(match=f"{prefix}:*"))
        if doomed:
            client.delete(*doomed)
        client.close()


@pytest.fixture(scope="module")
def healthy_gateway(gateway_container: RunningContainer) -> RunningContainer:
    """The container once /healthz answers 200 (fail with its state otherwise)."""
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        try:
            if httpx.get(gateway_container.url + "/healthz", timeout=1).status_code == 200:
                return gateway_container
        except httpx.HTTPError:
            pass
        state = _podman("inspect", "--format", "{{.State.Status}}", gateway_container.name, check=False)
        assert state.stdout.strip() in ("running", "created", "configured"), f"container {state.stdout}"
        time.sleep(0.2)
    pytest.fail("the container's /healthz did not answer 200 within 60 s")


def test_image_is_at_most_300_mb(gateway_image: BuiltImage) -> None:
    assert gateway_image.size_bytes <= MAX_IMAGE_BYTES, f"{gateway_image.size_bytes / 1e6:.0f} MB"


def test_health_and_readiness(healthy_gateway: RunningContainer) -> None:
    assert httpx.get(healthy_gateway.url + "/healthz", timeout=5).json()["status"] == "ok"
    ready = httpx.get(healthy_gateway.url + "/readyz", timeout=10)
    assert ready.status_code == 200, ready.text
    assert ready.json() == {"ready": True}
    # The admin's view: Redis answered, and the background probe found both upstreams (it runs at
    # start, then every 15 s).
    admin = {"authorization": f"Bearer {healthy_gateway.admin_key}"}
    deadline = time.monotonic() + 20
    while True:
        body = httpx.get(healthy_gateway.url + "/readyz", headers=admin, timeout=10).json()
        if None not in body["upstreams"].values() or time.monotonic() > deadline:
            break
        time.sleep(0.5)
    assert body["ready"] is True and body["redis"] is True, body
    assert body["upstreams"] == {"small": True, "large": True}, body
    # The image's HEALTHCHECK command, run inside the container by podman.
    check = _podman("healthcheck", "run", healthy_gateway.name, check=False)
    assert check.returncode == 0, check.stdout + check.stderr


def test_a_cascade_request_through_the_openai_sdk(healthy_gateway: RunningContainer) -> None:
    client = openai.OpenAI(base_url=healthy_gateway.url + "/v1", api_key="unused", max_retries=0)
    raw = client.chat.completions.with_raw_response.create(
        model="cascade", messages=[{"role": "user", "content": "A hard question: what is 2+2?"}]
    )
    completion = raw.parse()
    assert completion.choices[0].message.content == "The answer is four."
    headers = raw.headers
    assert headers["x-cascade-tier"] == "balanced"
    assert headers["x-cascade-models-called"] == "small,large"
    assert headers["x-cascade-escalated"] == "true" and headers["x-cascade-model"] == "large"
    assert float(headers["x-cascade-cost-usd"]) > 0
    policy = json.loads((DEPLOY / "config" / "policy.json").read_text())
    assert headers["x-cascade-policy"] == policy["policy_id"]


def test_metrics_count_the_request(healthy_gateway: RunningContainer) -> None:
    client = openai.OpenAI(base_url=healthy_gateway.url + "/v1", api_key="unused", max_retries=0)
    client.chat.completions.create(model="cascade", messages=[{"role": "user", "content": "What is 2+2?"}])
    response = httpx.get(healthy_gateway.url + "/metrics", timeout=5)
    assert response.status_code == 200
    families = scrape_families(response.text)
    assert "accepted" in families["cascade_requests"].values["outcome"]
    policy = json.loads((DEPLOY / "config" / "policy.json").read_text())
    assert families["cascade_policy_info"].values["policy_id"] == {policy["policy_id"]}


def test_runs_as_uid_10001_on_a_read_only_root(healthy_gateway: RunningContainer) -> None:
    pid = int(_podman("inspect", "--format", "{{.State.Pid}}", healthy_gateway.name).stdout)
    status = Path(f"/proc/{pid}/status").read_text()
    uids = re.search(r"^Uid:\s+(\d+)\s+(\d+)\s+(\d+)\s+(\d+)", status, re.MULTILINE)
    assert uids and set(uids.groups()) == {"10001"}, status  # real, effective, saved, filesystem
    assert "cascade" in Path(f"/proc/{pid}/cmdline").read_text()
    assert (
        _podman("inspect", "--format", "{{.HostConfig.ReadonlyRootfs}}", healthy_gateway.name).stdout.strip()
        == "true"
    )
    for path in ("/opt/cascade/written", "/etc/cascade/written", "/written"):
        write = _podman("exec", healthy_gateway.name, "python", "-c", f"open({path!r}, 'w')", check=False)
        assert write.returncode != 0 and (
            "Read-only file system" in write.stderr or "Permission denied" in write.stderr
        ), write.stderr


def test_installs_only_the_gateway_extra(healthy_gateway: RunningContainer) -> None:
    probe = "import importlib.util as u; print(' '.join(m for m in {!r} if u.find_spec(m)))"
    found = _podman(
        "exec", healthy_gateway.name, "python", "-c", probe.format((*CALIBRATION_ONLY, "pip", "setuptools"))
    ).stdout.split()
    assert found == []
    calibrate = _podman(
        "exec",
        healthy_gateway.name,
        "cascade",
        "calibrate",
        "runs.csv",
        "--tiers",
        "t.yaml",
        "-o",
        "p.json",
        check=False,
    )
    assert calibrate.returncode == 1
    assert (
        "cascade calibrate needs the calibrate extra: pip install 'cascade-gateway[calibrate]'"
        in calibrate.stderr
    )
