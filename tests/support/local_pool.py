"""Real llama-server models of the local pool on free ports, and `cascade serve` in front of them.

For e2e tests that must not collide with a pool or demo already running on the manifest's ports (a
developer's `cascade demo`, another test run): each server gets a free port, and the manifest
returned points at those ports, so ``localpool.demo_config.pool_gateway_config`` writes a config
for them. Needs scripts/setup.sh (llama-server and the models installed).
"""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest

from localpool.install import install_model, model_is_installed
from localpool.manifest import DEFAULT_MANIFEST, Manifest, load_manifest
from localpool.paths import PoolPaths
from localpool.pool import ServerOptions, server_command
from localpool.process import start_detached, stop, wait_healthy
from localpool.server_build import llama_server_binary
from tests.support.ports import free_port


def pool_paths(repo_root: Path) -> PoolPaths:
    """Where scripts/setup.sh installed the pool: ``$CASCADE_HOME`` or the repository's ``.cascade``."""
    home = os.environ.get("CASCADE_HOME")
    return PoolPaths(Path(home) if home else repo_root / ".cascade")


@contextmanager
def running_pool(
    repo_root: Path, servers: list[str], run: Path, timeout_s: float = 180
) -> Iterator[Manifest]:
    """Start ``servers`` (pool model names) on free ports; the manifest pointing at them; stopped after.

    A model not installed yet (the optional 1.5B one) is installed first, as `cascade demo` does.
    """
    paths = pool_paths(repo_root)
    manifest = load_manifest()
    binary = llama_server_binary()
    if binary is None:
        pytest.fail("llama-server is not installed; run scripts/setup.sh")
    for name in servers:
        if not model_is_installed(manifest.models[name], paths):
            install_model(name, manifest.models[name], paths, print, manifest_path=DEFAULT_MANIFEST)
    models = dict(manifest.models)
    models.update({n: manifest.models[n].model_copy(update={"port": free_port()}) for n in servers})
    options = ServerOptions.from_env(servers=len(servers))
    records = []
    try:
        for name in servers:
            spec = models[name]
            command = server_command(binary, paths.model_file(spec.file), name, spec, options)
            records.append(start_detached(command, run / f"{name}.log", run / f"{name}.pid", port=spec.port))
        for name, record in zip(servers, records, strict=True):
            health = f"http://127.0.0.1:{models[name].port}/health"
            wait_healthy(health, pid=record.pid, log_path=run / f"{name}.log", timeout_s=timeout_s, name=name)
        yield manifest.model_copy(update={"models": models})
    finally:
        for record in records:
            stop(record.pid, grace_s=10)


@contextmanager
def serving(config: Path, log: Path, timeout_s: float = 60) -> Iterator[str]:
    """`cascade serve --config config` on a free port (output to ``log``): its base URL; stopped after."""
    port = free_port()
    with log.open("wb") as out:
        process = subprocess.Popen(
            [sys.executable, "-m", "cascade_cli.main", "serve", "--config", str(config), "--port", str(port)],
            stdout=out,
            stderr=subprocess.STDOUT,
        )
    try:
        url = f"http://127.0.0.1:{port}"
        wait_healthy(f"{url}/readyz", pid=process.pid, log_path=log, timeout_s=timeout_s, name="gateway")
        yield url
    finally:
        process.terminate()
        try:
            process.wait(timeout=10)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()
