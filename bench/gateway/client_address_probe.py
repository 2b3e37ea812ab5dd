"""Probe (run by hand): whom the wrong-key throttle of a real `cascade serve` counts, and whom it stops.

Two fresh replicas on loopback, each with a private redis-server holding one client key (added with
`cascade keys add`), ``auth.failure_limit: 5`` and no ``trusted_proxies``; every request comes from
127.0.0.1 and asks ``GET /v1/models``:

* rotating: 30 wrong keys, each claiming another address in ``X-Forwarded-For``; prints the status
  of each and the first request answered 429 (``never`` if none was);
* lockout: five wrong keys claiming the address 198.51.100.7, then the stored valid key sent with
  that same claim; prints its status and ``Retry-After``.

    PYTHONPATH=$PWD .venv/bin/python bench/gateway/client_address_probe.py
"""

from __future__ import annotations

import subprocess
import sys
import tempfile
from pathlib import Path

import httpx

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO / "tests" / "reliability"))

from processes import RedisServer, write_gateway_config  # noqa: E402

from tests.support.gateway_process import GatewayProcess  # noqa: E402
from tests.support.policy_files import write_policy  # noqa: E402

CLAIMED = "198.51.100.7"


def _add_key(redis_url: str) -> str:
    out = subprocess.run(
        [sys.executable, "-m", "cascade_cli.main", "keys", "add", "probe", "--redis", redis_url],
        cwd=REPO,
        capture_output=True,
        text=True,
        check=True,
    )
    return next(word for word in out.stdout.split() if word.startswith("sk-"))


def _replica(directory: Path, name: str) -> tuple[GatewayProcess, RedisServer, str]:
    redis = RedisServer()
    redis.start()
    config = write_gateway_config(
        directory,
        upstream_base_url="http://127.0.0.1:9/v1",
        policy=write_policy(directory / "policy.json"),
        redis_url=redis.url,
        name=f"{name}.yaml",
        auth={"failure_limit": 5, "admin_key_env": None},
    )
    key = _add_key(redis.url)
    return GatewayProcess(config).start().wait_ready(), redis, key


def _get(gateway: GatewayProcess, key: str, claimed: str) -> httpx.Response:
    headers = {"authorization": f"Bearer {key}", "x-forwarded-for": claimed}
    return httpx.get(gateway.url + "/v1/models", headers=headers, timeout=10)


def rotating(gateway: GatewayProcess) -> None:
    """30 wrong keys, each from a different claimed address."""
    statuses = [_get(gateway, f"sk-wrong-{i}", f"10.9.{i}.1").status_code for i in range(30)]
    first = next((i + 1 for i, status in enumerate(statuses) if status == 429), None)
    print(f"rotating: statuses {statuses}")
    print(f"rotating: first 429 at request {first if first is not None else 'never'}")


def lockout(gateway: GatewayProcess, key: str) -> None:
    """Five wrong keys claiming CLAIMED, then the valid key with the same claim."""
    wrong = [_get(gateway, f"sk-wrong-{i}", CLAIMED).status_code for i in range(5)]
    valid = _get(gateway, key, CLAIMED)
    print(f"lockout: wrong keys {wrong}")
    print(f"lockout: valid key {valid.status_code} retry-after={valid.headers.get('retry-after')}")


def main() -> None:
    with tempfile.TemporaryDirectory() as tmp:
        for name, probe in (("rotating", rotating), ("lockout", lockout)):
            gateway, redis, key = _replica(Path(tmp), name)
            try:
                probe(gateway) if probe is rotating else lockout(gateway, key)
            finally:
                gateway.stop()
                redis.stop()


if __name__ == "__main__":
    main()
