"""A model server that dies says how: signal or exit code, in `up`'s error and `cascade models status`.

The seam is where the pool picks the llama-server binary (``require_installed``): a fake binary
prints a line, as llama-server does while it starts, then kills itself with SIGILL, which is what
a CPU feature the VM does not allow does to the real one.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from localpool import pool
from localpool.manifest import Manifest, load_manifest
from localpool.paths import PoolPaths
from localpool.process import ProcessError
from tests.support.ports import free_port

CASCADE = str(Path(sys.executable).with_name("cascade"))


def _fake_server(tmp_path: Path, body: str) -> Path:
    binary = tmp_path / "fake-llama-server"
    binary.write_text(f"#!/bin/sh\necho 'load_backend: loaded CPU backend'\n{body}\n")
    binary.chmod(0o755)
    return binary


def _one_model(manifest: Manifest) -> tuple[str, Manifest]:
    name = next(iter(manifest.models))
    spec = manifest.models[name].model_copy(update={"port": free_port()})
    return name, manifest.model_copy(update={"models": {**manifest.models, name: spec}})


def _pool_whose_server_runs(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, body: str
) -> tuple[PoolPaths, str, Manifest]:
    """A pool under ``tmp_path/home`` whose llama-server is a fake running ``body``, and one model of
    the manifest (on a free port) to start it for: (paths, model name, manifest)."""
    binary = _fake_server(tmp_path, body)
    monkeypatch.setattr(pool, "require_installed", lambda manifest, paths, names: binary)
    name, manifest = _one_model(load_manifest())
    return PoolPaths(tmp_path / "home"), name, manifest


def _status_command(home: Path) -> str:
    env = {k: v for k, v in os.environ.items() if k not in {"CASCADE_HOME", "CASCADE_RUN_DIR"}}
    env["CASCADE_HOME"] = str(home)
    result = subprocess.run(
        [CASCADE, "models", "status"], env=env, capture_output=True, text=True, timeout=120, check=False
    )
    assert result.returncode == 0, result.stderr
    return result.stdout


def test_a_server_killed_by_sigill_at_start_up_is_reported_with_its_signal(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    body = "echo 'threadpool_init: n_threads = 2'\nkill -ILL $$"
    paths, name, manifest = _pool_whose_server_runs(tmp_path, monkeypatch, body)

    with pytest.raises(ProcessError) as failure:
        pool.up(manifest, paths, [name], pool.ServerOptions(), timeout_s=60, say=lambda _: None)

    cause = "signal SIGILL (illegal instruction)"
    assert f"{name} exited during start-up with {cause}" in str(failure.value)
    assert "last log line: 'threadpool_init: n_threads = 2'" in str(failure.value)
    # The pool reaped it and recorded how it ended: `status` says so, in this process and the CLI's.
    (row,) = [r for r in pool.status(manifest, paths) if r.name == name]
    assert not row.running and row.dead is not None
    assert row.dead.startswith(f"exited with {cause}; last log line: 'threadpool_init: n_threads = 2'")
    shown = _status_command(paths.home)
    assert f"{name}: exited with {cause}; last log line: 'threadpool_init: n_threads = 2'" in shown
    # `down` clears the record of the dead server.
    pool.down(manifest, paths, [name], say=lambda _: None)
    assert not paths.pid_file(name).exists()


def test_a_server_that_exits_with_a_code_is_reported_with_that_code(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    body = "echo 'error: failed to load model' >&2\nexit 7"
    paths, name, manifest = _pool_whose_server_runs(tmp_path, monkeypatch, body)
    with pytest.raises(ProcessError, match=rf"{name} exited during start-up with exit code 7; "):
        pool.up(manifest, paths, [name], pool.ServerOptions(), timeout_s=60, say=lambda _: None)
    assert "last log line: 'error: failed to load model'" in _status_command(paths.home)


def test_a_pid_file_whose_process_is_gone_says_so_with_the_log_tail(tmp_path: Path) -> None:
    # A server started by another command, which died later: no exit status is known here.
    paths = PoolPaths(tmp_path / "home")
    name = next(iter(load_manifest().models))
    paths.run.mkdir(parents=True)
    paths.log_file(name).write_text("srv  update_slots: all slots are idle\nggml_abort: out of memory\n\n")
    finished = subprocess.Popen(["true"])  # a pid that no longer runs
    finished.wait()
    record = {"pid": finished.pid, "executable": "llama-server", "port": 1}  # as `up` writes it
    paths.pid_file(name).write_text(json.dumps(record) + "\n")
    shown = _status_command(paths.home)
    gone = f"{name}: pid {finished.pid} is gone (exit status unknown)"
    assert f"{gone}; last log line: 'ggml_abort: out of memory'" in shown
