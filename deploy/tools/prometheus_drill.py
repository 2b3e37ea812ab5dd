"""Operations drill: a real Prometheus scraping two gateway replicas that share one Redis.

Starts, all on loopback ports: the scripted upstream (deploy/tools/scripted_upstream.py), two
`cascade serve` replicas whose policy and state live in the real Redis (127.0.0.1:6379, under a
private key prefix so nothing else on that Redis is touched), and Prometheus (Debian's `prometheus`
binary) with a generated config that scrapes both replicas every second and loads
deploy/prometheus/rules/. Then it sends a small bounded load, and checks through Prometheus's HTTP
API that both targets are up, that the counters move, and that a policy pushed with
`cascade policy push` switches both replicas (cascade_policy_info). Everything it started is
stopped at the end.

    scripts/ops-prometheus-two-replicas.sh [--requests 400] [--json]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import random
import shutil
import socket
import subprocess
import sys
import tempfile
import time
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import httpx
import redis
import yaml

DEPLOY = Path(__file__).resolve().parents[1]
REDIS_URL = "redis://127.0.0.1:6379/0"
RULES = DEPLOY / "prometheus" / "rules" / "cascade.rules.yml"


class DrillError(Exception):
    """A drill check failed; the message says which."""


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def _wait_http(url: str, timeout_s: float, ok: tuple[int, ...] = (200,)) -> None:
    deadline = time.monotonic() + timeout_s
    last = "no answer"
    while time.monotonic() < deadline:
        try:
            response = httpx.get(url, timeout=1.0)
            if response.status_code in ok:
                return
            last = f"HTTP {response.status_code}: {response.text[:200]}"
        except httpx.HTTPError as exc:
            last = type(exc).__name__
        time.sleep(0.1)
    raise DrillError(f"{url} not ready within {timeout_s}s ({last})")


def _cascade_bin() -> str:
    # The console script of the interpreter running the drill (the project's .venv); overridable.
    return os.environ.get("CASCADE_BIN") or str(Path(sys.executable).parent / "cascade")


class Processes:
    """Child processes started by the drill, stopped (terminate, then kill) in reverse order."""

    def __init__(self, log_dir: Path) -> None:
        self.log_dir = log_dir
        self.children: list[tuple[str, subprocess.Popen[bytes]]] = []

    def start(self, name: str, argv: list[str], env: dict[str, str]) -> subprocess.Popen[bytes]:
        log = (self.log_dir / f"{name}.log").open("wb")
        process = subprocess.Popen(argv, stdout=log, stderr=subprocess.STDOUT, env=env)
        self.children.append((name, process))
        return process

    def stop_all(self) -> None:
        for _, process in reversed(self.children):
            if process.poll() is None:
                process.terminate()
        for _, process in reversed(self.children):
            try:
                process.wait(timeout=10)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait()

    def log_tail(self, name: str, lines: int = 15) -> str:
        path = self.log_dir / f"{name}.log"
        return "\n".join(path.read_text(errors="replace").splitlines()[-lines:]) if path.exists() else ""


@contextmanager
def _redis_prefix() -> Iterator[str]:
    prefix = f"cascade-drill-{uuid.uuid4().hex[:10]}"
    try:
        yield prefix
    finally:
        client = redis.Redis.from_url(REDIS_URL)
        doomed = list(client.scan_iter(match=f"{prefix}:*"))
        if doomed:
            client.delete(*doomed)
        client.close()


def _variant_policy(source: Path, target: Path) -> str:
    """A second valid policy (the default tier's thresholds moved): a different policy_id."""
    from policies.store import build_policy, save_policy

    document = json.loads(source.read_text())
    document.pop("policy_id")
    document.pop("created_at")
    for route in document["tiers"][document["default_tier"]]["routes"]:
        route["thresholds"] = [min(0.95, t + 0.1) for t in route["thresholds"]]
    policy = build_policy(document)
    save_policy(policy, target)
    return policy.policy_id


def _push(policy: Path, env: dict[str, str]) -> str:
    result = subprocess.run(
        [_cascade_bin(), "policy", "push", str(policy), "--redis", REDIS_URL],
        capture_output=True,
        text=True,
        env=env,
        timeout=60,
    )
    if result.returncode != 0:
        raise DrillError(f"cascade policy push failed: {result.stderr.strip()}")
    return result.stdout.strip()


class PrometheusAPI:
    """Instant queries against Prometheus's HTTP API."""

    def __init__(self, url: str) -> None:
        self.url = url

    def query(self, expr: str) -> list[dict[str, Any]]:
        response = httpx.get(f"{self.url}/api/v1/query", params={"query": expr}, timeout=5)
        body = response.json()
        if body.get("status") != "success":
            raise DrillError(f"query {expr!r} failed: {body}")
        return body["data"]["result"]

    def by_label(self, expr: str, label: str) -> dict[str, float]:
        return {s["metric"].get(label, ""): float(s["value"][1]) for s in self.query(expr)}

    def wait_for(self, expr: str, predicate: Any, timeout_s: float, what: str) -> float:
        """Poll ``expr`` until ``predicate(result)`` holds; seconds waited."""
        started = time.monotonic()
        while time.monotonic() - started < timeout_s:
            if predicate(self.query(expr)):
                return time.monotonic() - started
            time.sleep(0.25)
        raise DrillError(f"timed out after {timeout_s}s waiting for {what} ({expr} = {self.query(expr)})")


async def _load(gateways: list[str], requests: int, concurrency: int, seed: int) -> dict[str, int]:
    """``requests`` chat requests, round-robin over the replicas: easy, hard and direct-tier mixes."""
    rng = random.Random(seed)
    statuses: dict[str, int] = {}
    queue: asyncio.Queue[int] = asyncio.Queue()
    for i in range(requests):
        queue.put_nowait(i)

    async def worker(client: httpx.AsyncClient) -> None:
        while not queue.empty():
            i = queue.get_nowait()
            model = rng.choice(["cascade", "cascade", "cascade/economy", "cascade/quality"])
            prompt = "A hard question: 17*23?" if rng.random() < 0.4 else "What is 2+2?"
            response = await client.post(
                f"{gateways[i % len(gateways)]}/v1/chat/completions",
                json={"model": model, "max_tokens": 16, "messages": [{"role": "user", "content": prompt}]},
            )
            statuses[str(response.status_code)] = statuses.get(str(response.status_code), 0) + 1

    async with httpx.AsyncClient(timeout=120) as client:
        await asyncio.gather(*(worker(client) for _ in range(concurrency)))
    return statuses


def _prometheus_config(path: Path, targets: list[str]) -> None:
    # The project's rules, unchanged except that every group is evaluated each second (the
    # recording rules run every 30s in production) so the drill sees them within its few seconds.
    rules = yaml.safe_load(RULES.read_text())
    for group in rules["groups"]:
        group["interval"] = "1s"
    rules_path = path.parent / RULES.name
    rules_path.write_text(yaml.safe_dump(rules, sort_keys=False))
    path.write_text(
        yaml.safe_dump(
            {
                "global": {"scrape_interval": "1s", "evaluation_interval": "1s"},
                "rule_files": [str(rules_path)],
                "scrape_configs": [{"job_name": "cascade-gateway", "static_configs": [{"targets": targets}]}],
            }
        )
    )


JOB = '{job="cascade-gateway"}'
SERVED = f"sum by (instance) (cascade_requests_total{JOB})"
POLICY_INFO = f"cascade_policy_info{JOB} == 1"


class Drill:
    """The drill's stack (upstream, two replicas, Prometheus) and its checks, step by step."""

    def __init__(self, work: Path, prefix: str, log: Any, *, pool: bool = False) -> None:
        self.work = work
        self.pool = pool
        self.log = log
        self.env = {**os.environ, "CASCADE_REDIS_PREFIX": prefix}
        for name in ("CASCADE_API_KEYS", "CASCADE_ADMIN_KEY", "CASCADE_POLICY", "CASCADE_REDIS_URL"):
            self.env.pop(name, None)
        self.procs = Processes(work)
        self.prefix = prefix
        self.gateways: list[str] = []
        self.api: PrometheusAPI | None = None
        self.report: dict[str, Any] = {}
        self._scripted_port: int | None = None

    def start_upstream_and_replicas(self) -> None:
        """Upstreams, the bootstrap policy pushed to Redis, two `cascade serve` replicas."""
        config = yaml.safe_load((DEPLOY / "config" / "gateway.yaml").read_text())
        for model in config["models"].values():
            model["base_url"] = self._upstream_url(model["model"])
        config["policy"] = config["redis_url"] = REDIS_URL
        config_path = self.work / "gateway.yaml"
        config_path.write_text(yaml.safe_dump(config))

        policy = DEPLOY / "config" / "policy.json"
        self.report["policy_before"] = _push(policy, self.env)
        self.log(f"cascade policy push {policy.relative_to(DEPLOY.parent)} -> {self.report['policy_before']}")
        ports = [_free_port(), _free_port()]
        self.gateways = [f"http://127.0.0.1:{p}" for p in ports]
        for index, port in enumerate(ports):
            self.procs.start(
                f"gateway{index}",
                [
                    _cascade_bin(),
                    "serve",
                    "--config",
                    str(config_path),
                    "--host",
                    "127.0.0.1",
                    "--port",
                    str(port),
                ],
                self.env,
            )
        for index, url in enumerate(self.gateways):
            try:
                _wait_http(f"{url}/readyz", 30)
            except DrillError as exc:
                raise DrillError(f"{exc}\n{self.procs.log_tail(f'gateway{index}')}") from exc
        self.log(f"2 replicas ready: {', '.join(self.gateways)} (one Redis, key prefix {self.prefix})")

    def _upstream_url(self, model_id: str) -> str:
        """The running local pool's server for ``model_id``, or the drill's own scripted upstream."""
        if self.pool:
            from localpool.manifest import load_manifest

            url = f"http://127.0.0.1:{load_manifest().models[model_id].port}"
            _wait_http(f"{url}/health", 5)
            return f"{url}/v1"
        if self._scripted_port is None:
            self._scripted_port = _free_port()
            self.procs.start(
                "upstream",
                [
                    sys.executable,
                    str(DEPLOY / "tools" / "scripted_upstream.py"),
                    "--port",
                    str(self._scripted_port),
                ],
                self.env,
            )
            _wait_http(f"http://127.0.0.1:{self._scripted_port}/health", 20)
        return f"http://127.0.0.1:{self._scripted_port}/v1"

    def start_prometheus(self, binary: str) -> PrometheusAPI:
        """Prometheus scraping both replicas every second, with the project's rules loaded."""
        port = _free_port()
        config = self.work / "prometheus.yml"
        _prometheus_config(config, [url.removeprefix("http://") for url in self.gateways])
        self.procs.start(
            "prometheus",
            [
                binary,
                f"--config.file={config}",
                f"--storage.tsdb.path={self.work / 'tsdb'}",
                f"--web.listen-address=127.0.0.1:{port}",
                "--log.level=warn",
            ],
            self.env,
        )
        api = PrometheusAPI(f"http://127.0.0.1:{port}")
        _wait_http(f"{api.url}/-/ready", 30)
        up = f"up{JOB} == 1"
        api.wait_for(up, lambda r: len(r) == 2, 20, "both targets up")
        self.report["targets_up"] = sorted(s["metric"]["instance"] for s in api.query(up))
        self.log(f"prometheus {api.url}: targets up = {self.report['targets_up']}")
        self.api = api
        return api

    def load_and_check_counters(self, requests: int, concurrency: int) -> None:
        """Two bounded load phases; cascade_requests_total must grow on both replicas."""
        api = self._api()
        half = requests // 2
        started = time.monotonic()
        statuses = [asyncio.run(_load(self.gateways, half, concurrency, seed=1))]
        api.wait_for(SERVED, lambda r: _total(r) >= half, 30, "first half scraped")
        first = api.by_label(SERVED, "instance")
        statuses.append(asyncio.run(_load(self.gateways, requests - half, concurrency, seed=2)))
        self.report["load_seconds"] = round(time.monotonic() - started, 2)
        api.wait_for(SERVED, lambda r: _total(r) >= requests, 30, "second half scraped")
        second = api.by_label(SERVED, "instance")
        self.report["statuses"] = statuses
        self.report["requests_per_instance"] = {"after_first_half": first, "after_second_half": second}
        if len(second) != 2 or not all(second[i] > first.get(i, 0) for i in second):
            raise DrillError(f"counters did not move on both replicas: {first} -> {second}")
        self.log(
            f"load: {requests} requests (concurrency {concurrency}) in {self.report['load_seconds']}s, "
            f"HTTP statuses per phase {statuses}"
        )
        self.log(f"{SERVED}: {first} -> {second}")

        # Recording rules need two evaluations after the scrapes of the load.
        api.wait_for("cascade:escalation_rate:ratio_rate30m", bool, 20, "the recording rules")
        queries = {
            "outcomes": (f"sum by (outcome) (cascade_requests_total{JOB})", "outcome"),
            "escalation_rate_observed": ("cascade:escalation_rate:ratio_rate30m", "tier"),
            "escalation_rate_expected": ("cascade:expected_escalation_rate:max", "tier"),
            "upstream_error_ratio": ("cascade:upstream_error_ratio:rate5m", "model"),
            "overhead_p50_seconds": (
                f"histogram_quantile(0.5, sum by (le) (rate(cascade_overhead_seconds_bucket{JOB}[5m])))",
                "",
            ),
            "overhead_p99_seconds": ("cascade:overhead_seconds:p99_5m", ""),
            # The example policy's score bins are placeholders, not the scripted upstream's scores.
            "score_drift_samples": (f"sum by (tier) (cascade_score_drift_samples{JOB})", "tier"),
            "score_drift_psi_max": (f"max by (tier) (cascade_score_drift_psi{JOB})", "tier"),
        }
        for key, (expr, label) in queries.items():
            self.report[key] = api.by_label(expr, label)
            self.log(f"{expr}: {self.report[key]}")

    def push_and_check_switch(self) -> None:
        """Push a second policy through Redis; both replicas must serve it, without a restart."""
        api = self._api()
        before = {s["metric"]["instance"]: s["metric"]["policy_id"] for s in api.query(POLICY_INFO)}
        if len(before) != 2 or set(before.values()) != {self.report["policy_before"]}:
            raise DrillError(f"replicas do not both serve {self.report['policy_before']}: {before}")
        pids = [p.pid for name, p in self.procs.children if name.startswith("gateway")]
        second_policy = self.work / "policy-v2.json"
        expected_id = _variant_policy(DEPLOY / "config" / "policy.json", second_policy)
        started = time.monotonic()
        self.report["policy_after"] = _push(second_policy, self.env)
        pushed_at = time.monotonic()  # the CLI has returned: the new policy is in Redis
        self.report["push_command_seconds"] = round(pushed_at - started, 3)
        if self.report["policy_after"] != expected_id:
            raise DrillError(f"push printed {self.report['policy_after']}, expected {expected_id}")
        switched = _wait_replicas_switch(self.gateways, expected_id, timeout_s=15)
        self.report["replica_switch_seconds"] = round(switched - pushed_at, 3)
        new = f'cascade_policy_info{{job="cascade-gateway", policy_id="{expected_id}"}} == 1'
        api.wait_for(new, lambda r: len(r) == 2, 20, "both replicas on the new policy in Prometheus")
        self.report["prometheus_switch_seconds"] = round(time.monotonic() - pushed_at, 3)
        after = {s["metric"]["instance"]: s["metric"]["policy_id"] for s in api.query(POLICY_INFO)}
        alive = [p.pid for name, p in self.procs.children if name.startswith("gateway") and p.poll() is None]
        if alive != pids:
            raise DrillError("a replica restarted during the policy switch")
        self.report["policy_info_before"], self.report["policy_info_after"] = before, after
        self.log(f"{POLICY_INFO} before push: {before}")
        self.log(
            f"cascade policy push -> {expected_id} (the command took "
            f"{self.report['push_command_seconds']}s); after it returned, every replica's /metrics "
            f"showed it within {self.report['replica_switch_seconds']}s and Prometheus within "
            f"{self.report['prometheus_switch_seconds']}s (same processes, no restart)"
        )
        self.log(f"{POLICY_INFO} after push:  {after}")

    def report_alerts(self) -> None:
        """How many alert rules Prometheus loaded, and which are pending or firing."""
        rules = httpx.get(f"{self._api().url}/api/v1/rules", params={"type": "alert"}, timeout=5).json()
        groups = rules["data"]["groups"]
        self.report["alert_rules_loaded"] = sum(len(g["rules"]) for g in groups)
        self.report["alerts_active"] = sorted(
            r["name"] for g in groups for r in g["rules"] if r["state"] != "inactive"
        )
        self.log(
            f"alert rules loaded: {self.report['alert_rules_loaded']}, pending/firing: "
            f"{self.report['alerts_active'] or 'none'}"
        )

    def _api(self) -> PrometheusAPI:
        if self.api is None:
            raise DrillError("prometheus is not running")
        return self.api


def _total(result: list[dict[str, Any]]) -> float:
    return sum(float(sample["value"][1]) for sample in result)


def run(requests: int, concurrency: int, log: Any = print, *, pool: bool = False) -> dict[str, Any]:
    """Run the drill; return the measured facts (raises DrillError when a check fails)."""
    prometheus = shutil.which("prometheus")
    if prometheus is None:
        raise DrillError("prometheus not found: apt-get install prometheus (scripts/setup.sh does)")
    redis.Redis.from_url(REDIS_URL).ping()
    with tempfile.TemporaryDirectory(prefix="cascade-drill-") as tmp, _redis_prefix() as prefix:
        drill = Drill(Path(tmp), prefix, log, pool=pool)
        try:
            drill.start_upstream_and_replicas()
            drill.start_prometheus(prometheus)
            drill.load_and_check_counters(requests, concurrency)
            drill.push_and_check_switch()
            drill.report_alerts()
        finally:
            drill.procs.stop_all()
        return {"requests": requests, "concurrency": concurrency, **drill.report}


def _wait_replicas_switch(gateways: list[str], policy_id: str, timeout_s: float) -> float:
    """Poll every replica's /metrics until all export ``policy_id``; the monotonic time they did."""
    from prometheus_client.parser import text_string_to_metric_families

    deadline = time.monotonic() + timeout_s
    pending = set(gateways)
    while pending and time.monotonic() < deadline:
        for url in list(pending):
            text = httpx.get(f"{url}/metrics", timeout=2).text
            for family in text_string_to_metric_families(text):
                if family.name == "cascade_policy_info" and any(
                    s.labels.get("policy_id") == policy_id and s.value == 1 for s in family.samples
                ):
                    pending.discard(url)
        if pending:
            time.sleep(0.02)
    if pending:
        raise DrillError(f"replicas {sorted(pending)} still not on policy {policy_id} after {timeout_s}s")
    return time.monotonic()


def main() -> int:
    """Command-line entry point; exit 1 with a one-line reason when a check fails."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--requests", type=int, default=400, help="total requests (bounded load)")
    parser.add_argument("--concurrency", type=int, default=8)
    parser.add_argument("--json", action="store_true", help="print the measured facts as JSON at the end")
    parser.add_argument(
        "--pool",
        action="store_true",
        help="call the running local pool (`cascade models up`), not the scripted upstream",
    )
    args = parser.parse_args()
    try:
        report = run(args.requests, args.concurrency, log=lambda m: print(m, flush=True), pool=args.pool)
    except (DrillError, redis.ConnectionError) as exc:
        print(f"drill failed: {exc}", file=sys.stderr)
        return 1
    print("drill passed: both targets up, counters moving, policy push switched both replicas")
    if args.json:
        print(json.dumps(report, sort_keys=True))
    return 0


if __name__ == "__main__":
    sys.exit(main())
