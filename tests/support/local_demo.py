"""``cascade demo`` as the e2e tests run it: the gateway in front of the session's real pool.

The one way the e2e tests start the local demo. ``running_demo(pool, repo_root, work, policy=None)``
starts what ``cascade demo --policy policy`` starts, on the servers of the session's ``local_pool``
(tests/support/local_pool.py: the pool's server command and options, each server on a free port
and started once per run): the servers of the pool models the policy names, and ``cascade serve``
on the config ``localpool.demo_config`` writes (without ``policy``: the committed demo policy with
the demo's ``coverage``). It yields a ``LocalDemo``; the gateway is stopped on exit, the servers
stay up for the next test. ``pool_env`` is the environment of a CLI run beside it (``cascade
replay``); ``serving_gateway(config, log)`` is ``cascade serve`` on any config, stopped on exit.
Needs scripts/setup.sh (llama-server and the models, in ``$CASCADE_HOME`` or the
repository's ``.cascade``).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from localpool.demo_cli import DEFAULT_POLICY, DEMO_COVERAGE, read_policy, served_models
from localpool.demo_config import pool_gateway_config, write_gateway_config
from localpool.manifest import Manifest
from localpool.process import wait_healthy
from tests.support.local_pool import LocalPool, pool_paths
from tests.support.ports import free_port


@dataclass(frozen=True)
class LocalDemo:
    """A running demo: the gateway's URL, its config and log, the pool as served (free ports)."""

    url: str
    config: Path
    gateway_log: Path
    manifest: Manifest


def pool_env(repo_root: Path) -> dict[str, str]:
    """The environment of a CLI run beside the demo (``cascade replay``): the pool's home set."""
    return {**os.environ, "CASCADE_HOME": str(pool_paths(repo_root).home)}


@contextmanager
def running_demo(
    pool: LocalPool,
    repo_root: Path,
    work: Path,
    policy: Path | None = None,
    prices: Path | None = None,
    config_changes: dict[str, Any] | None = None,
) -> Iterator[LocalDemo]:
    """The demo's gateway for ``policy`` (default: the committed demo policy, with the demo's
    coverage rule) in front of ``pool``'s servers of the models ``cascade demo`` names (kind
    sections' models included); ``prices``: as ``cascade demo --prices`` (the sheet the policy was
    calibrated with); ``config_changes``: top-level config sections added to the demo's config
    (``{"console": {"enabled": True}}``)."""
    coverage = DEMO_COVERAGE if policy is None else None
    policy, names, _, _ = read_policy((policy or repo_root / DEFAULT_POLICY).resolve())
    names = served_models(names, coverage)
    served = pool.serve(names)
    work.mkdir(parents=True, exist_ok=True)
    gateway_config = pool_gateway_config(served, names, policy, coverage=coverage, prices=prices)
    gateway_config.update(config_changes or {})
    config = write_gateway_config(work / "demo-gateway.yaml", gateway_config)
    gateway_log = work / "gateway.log"
    with serving_gateway(config, gateway_log, cwd=repo_root) as url:
        yield LocalDemo(url, config, gateway_log, served)


@contextmanager
def serving_gateway(config: Path, log: Path, cwd: Path | None = None) -> Iterator[str]:
    """``cascade serve --config config`` on a free port, its output appended to ``log``, until it is
    ready; yields its URL and stops it on exit."""
    port = free_port()
    with log.open("ab") as out:
        gateway = subprocess.Popen(
            [sys.executable, "-m", "cascade_cli.main", "serve", "--config", str(config), "--port", str(port)],
            cwd=cwd,
            stdin=subprocess.DEVNULL,
            stdout=out,
            stderr=subprocess.STDOUT,
        )
    try:
        url = f"http://127.0.0.1:{port}"
        wait_healthy(f"{url}/readyz", pid=gateway.pid, log_path=log, timeout_s=60, name="gateway")
        yield url
    finally:
        _terminate(gateway)


def _terminate(process: subprocess.Popen[bytes]) -> None:
    process.terminate()
    try:
        process.wait(timeout=15)
    except subprocess.TimeoutExpired:
        process.kill()
        process.wait()


@dataclass(frozen=True)
class ReplayRun:
    """What ``replay_through`` saw: the report, its per-request rows, the CLI's output and exit code."""

    report: dict[str, Any]
    rows: list[dict[str, Any]]
    output: str
    returncode: int

    def assert_within_heldout(
        self,
        tiers: Iterable[str],
        requests: int,
        metrics: Iterable[str] = ("quality", "cost_usd", "escalation_rate"),
    ) -> None:
        """The policy served is the one replayed, and each tier's arm has every request and realized
        intervals of ``metrics`` (by default quality, cost and escalation) that contain its held-out
        expectation."""
        assert self.report["policy"]["matches"] is True, self.output
        arms = {arm["tier"]: arm for arm in self.report["arms"]}
        assert set(arms) == set(tiers), self.output
        for tier, arm in arms.items():
            assert arm["requests"] == requests and not arm["missing"], (tier, self.output)
            assert arm["expected_basis"] == "heldout", tier
            for metric in metrics:
                assert arm[metric]["outside"] is False, (tier, metric, arm[metric], self.output)


def replay_through(
    repo_root: Path,
    demo: LocalDemo,
    prompts: Path,
    policy: Path,
    tiers: list[str],
    limit: int,
    out: Path,
    *options: str,
) -> ReplayRun:
    """``cascade replay`` of ``prompts`` through the running ``demo``'s ``tiers`` (``--strict``, two
    requests at once, the first ``limit`` questions), as a user runs it beside the demo; ``options``:
    further flags (``--stream``, ``--confidence``)."""
    result = subprocess.run(
        [
            sys.executable,
            "-m",
            "cascade_cli.main",
            "replay",
            str(prompts),
            "--gateway",
            demo.url,
            "--policy",
            str(policy),
            "--tier",
            ",".join(tiers),
            "--limit",
            str(limit),
            "--concurrency",
            "2",
            "--strict",
            "-o",
            str(out),
            *options,
        ],
        cwd=repo_root,
        env=pool_env(repo_root),
        capture_output=True,
        text=True,
        timeout=1800,
    )
    output = result.stdout + result.stderr
    report = json.loads(out.read_text(encoding="utf-8"))
    lines = out.with_name(out.stem + ".requests.jsonl").read_text(encoding="utf-8").splitlines()
    return ReplayRun(report, [json.loads(line) for line in lines], output, result.returncode)
