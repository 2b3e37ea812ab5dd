"""``cascade demo`` as the e2e tests run it: the real pool and the gateway, on free ports.

The one way the e2e tests start the local demo. ``running_demo(repo_root, work, policy=None)``
starts what ``cascade demo --policy policy`` starts (the servers of the pool models the policy
names, with the pool's server command and options, and ``cascade serve`` on the config
``localpool.demo_config`` writes; without ``policy`` the committed demo policy with the demo's
``coverage``), each server on a free port instead of the manifest's, so that a test never collides
with a demo someone runs on the same machine. A model not installed yet (the optional 1.5B one) is
installed first, as ``cascade demo`` does. It yields a ``LocalDemo``; everything is stopped on
exit. ``pool_env`` is the environment of a CLI run beside it (``cascade replay``). Needs
scripts/setup.sh (llama-server and the models, in ``$CASCADE_HOME`` or the repository's
``.cascade``).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Iterable, Iterator
from contextlib import ExitStack, contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from localpool.demo_cli import DEFAULT_POLICY, DEMO_COVERAGE, read_policy, served_models
from localpool.demo_config import pool_gateway_config, write_gateway_config
from localpool.install import install_model, model_is_installed
from localpool.manifest import DEFAULT_MANIFEST, Manifest, load_manifest
from localpool.paths import PoolPaths
from localpool.pool import ServerOptions, server_command
from localpool.process import start_detached, stop, wait_healthy
from localpool.server_build import llama_server_binary
from tests.support.ports import free_port


@dataclass(frozen=True)
class LocalDemo:
    """A running demo: the gateway's URL, its config and log, the pool as served (free ports)."""

    url: str
    config: Path
    gateway_log: Path
    manifest: Manifest
    servers: dict[str, Path]  # server name -> its llama-server log


def pool_paths(repo_root: Path) -> PoolPaths:
    """Where scripts/setup.sh installed the pool: ``$CASCADE_HOME`` or the repository's ``.cascade``."""
    home = os.environ.get("CASCADE_HOME")
    return PoolPaths(Path(home) if home else repo_root / ".cascade")


def pool_env(repo_root: Path) -> dict[str, str]:
    """The environment of a CLI run beside the demo (``cascade replay``): the pool's home set."""
    return {**os.environ, "CASCADE_HOME": str(pool_paths(repo_root).home)}


@contextmanager
def running_demo(
    repo_root: Path, work: Path, policy: Path | None = None, prices: Path | None = None
) -> Iterator[LocalDemo]:
    """The demo's servers and gateway for ``policy`` (default: the committed demo policy, with the
    demo's coverage rule), as ``cascade demo`` names them (kind sections' models included);
    ``prices``: as ``cascade demo --prices`` (the sheet the policy was calibrated with)."""
    coverage = DEMO_COVERAGE if policy is None else None
    policy, names, _, _ = read_policy((policy or repo_root / DEFAULT_POLICY).resolve())
    names = served_models(names, coverage)
    paths = pool_paths(repo_root)
    manifest = load_manifest()
    servers = manifest.servers_for(names)
    binary = llama_server_binary()
    if binary is None:
        pytest.fail("llama-server is not installed; run scripts/setup.sh")
    for name in servers:
        if not model_is_installed(manifest.models[name], paths):
            install_model(name, manifest.models[name], paths, print, manifest_path=DEFAULT_MANIFEST)
    models = {**manifest.models}
    models.update({n: manifest.models[n].model_copy(update={"port": free_port()}) for n in servers})
    served = manifest.model_copy(update={"models": models})
    options = ServerOptions.from_env(servers=len(servers))
    work.mkdir(parents=True, exist_ok=True)
    logs = {name: work / f"{name}.log" for name in servers}
    with ExitStack() as stack:
        for name in servers:
            spec = served.models[name]
            command = server_command(binary, paths.model_file(spec.file), name, spec, options)
            record = start_detached(command, logs[name], work / f"{name}.pid", port=spec.port)
            stack.callback(stop, record.pid, grace_s=10)
            wait_healthy(
                f"http://127.0.0.1:{spec.port}/health",
                pid=record.pid,
                log_path=logs[name],
                timeout_s=180,
                name=name,
            )
        gateway_config = pool_gateway_config(served, names, policy, coverage=coverage, prices=prices)
        config = write_gateway_config(work / "demo-gateway.yaml", gateway_config)
        port = free_port()
        gateway_log = work / "gateway.log"
        with gateway_log.open("ab") as out:
            gateway = subprocess.Popen(
                [
                    sys.executable,
                    "-m",
                    "cascade_cli.main",
                    "serve",
                    "--config",
                    str(config),
                    "--port",
                    str(port),
                ],
                cwd=repo_root,
                stdin=subprocess.DEVNULL,
                stdout=out,
                stderr=subprocess.STDOUT,
            )
        stack.callback(_terminate, gateway)
        url = f"http://127.0.0.1:{port}"
        wait_healthy(f"{url}/readyz", pid=gateway.pid, log_path=gateway_log, timeout_s=60, name="gateway")
        yield LocalDemo(url, config, gateway_log, served, logs)


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

    def assert_within_heldout(self, tiers: Iterable[str], requests: int) -> None:
        """The policy served is the one replayed, and each tier's arm has every request and realized
        quality, cost and escalation intervals that contain its held-out expectation."""
        assert self.report["policy"]["matches"] is True, self.output
        arms = {arm["tier"]: arm for arm in self.report["arms"]}
        assert set(arms) == set(tiers), self.output
        for tier, arm in arms.items():
            assert arm["requests"] == requests and not arm["missing"], (tier, self.output)
            assert arm["expected_basis"] == "heldout", tier
            for metric in ("quality", "cost_usd", "escalation_rate"):
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
