"""``cascade models up | down | status``: one llama-server per model on 127.0.0.1, ports from the manifest."""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

from localpool.install import model_is_installed
from localpool.manifest import Manifest, ModelSpec
from localpool.paths import PoolPaths
from localpool.process import (
    ProcessError,
    death_report,
    describe_exit,
    is_alive,
    load_record,
    read_record,
    record_exit,
    start_detached,
    stop,
    wait_healthy,
)
from localpool.server_build import llama_server_binary

# Sized for a small shared machine: the cores split between the servers (llama.cpp's threads spin
# while waiting, so oversubscribing cores slows every server down: measured on 2 cores, three servers
# answering 90 MMLU questions, 3 in flight: 2 threads each 75.7 s, 1 thread each 36.2 s), and
# 2 request slots per server. The context is each model's own (``context`` in the manifest), one
# pool of KV cache both slots draw from (``--kv-unified``), so one request may use all of it: an
# agent CLI's first request is 6-12k tokens. Prompts of idle slots are kept in RAM (``--cache-ram``,
# llama-server's prompt cache) so that the next turn of a conversation re-reads only what is new;
# llama.cpp's default (8 GiB per server) is bounded here for a machine running several servers.
DEFAULT_PARALLEL = 2
DEFAULT_CACHE_RAM_MIB = 2048


@dataclass(frozen=True)
class ServerOptions:
    """How llama-server is run (threads, context and prompt cache are per server).

    ``context`` None: each model's manifest ``context``; a number: that context for every server.
    """

    host: str = "127.0.0.1"
    threads: int = 1
    context: int | None = None
    parallel: int = DEFAULT_PARALLEL
    cache_ram_mib: int = DEFAULT_CACHE_RAM_MIB

    @classmethod
    def from_env(cls, host: str = "127.0.0.1", servers: int = 1, context: int | None = None) -> ServerOptions:
        """Threads = cores / servers (at least 1); ``context`` (a CLI option) over the environment.

        ``CASCADE_LLAMA_THREADS``, ``CASCADE_LLAMA_CONTEXT``, ``CASCADE_LLAMA_PARALLEL`` and
        ``CASCADE_LLAMA_CACHE_RAM`` (MiB, 0 = no prompt cache in RAM) override.
        """
        threads = max(1, (os.cpu_count() or 1) // max(1, servers))
        env_context = os.environ.get("CASCADE_LLAMA_CONTEXT")
        return cls(
            host=host,
            threads=int(os.environ.get("CASCADE_LLAMA_THREADS", threads)),
            context=context if context is not None else (int(env_context) if env_context else None),
            parallel=int(os.environ.get("CASCADE_LLAMA_PARALLEL", DEFAULT_PARALLEL)),
            cache_ram_mib=int(os.environ.get("CASCADE_LLAMA_CACHE_RAM", DEFAULT_CACHE_RAM_MIB)),
        )

    def context_of(self, spec: ModelSpec) -> int:
        """The context a model's server gets: the override, else the model's own."""
        return self.context if self.context is not None else spec.context


@dataclass(frozen=True)
class ModelStatus:
    """One row of ``cascade models status``."""

    name: str
    port: int
    installed: bool
    pid: int | None
    dead: str | None = None  # a server whose pid file outlived it: how it ended and its log's last line

    @property
    def running(self) -> bool:
        return self.pid is not None


def base_url(spec: ModelSpec, host: str = "127.0.0.1") -> str:
    """The OpenAI-compatible base URL of a model's server."""
    return f"http://{host}:{spec.port}/v1"


def server_command(
    binary: Path, model_path: Path, name: str, spec: ModelSpec, options: ServerOptions
) -> list[str]:
    """The llama-server command line for one model (``--alias`` = the pool name, the upstream model id)."""
    return [
        str(binary),
        "--model",
        str(model_path),
        "--alias",
        name,
        "--host",
        options.host,
        "--port",
        str(spec.port),
        "--threads",
        str(options.threads),
        "--ctx-size",
        str(options.context_of(spec)),
        "--kv-unified",
        "--parallel",
        str(options.parallel),
        "--cache-ram",
        str(options.cache_ram_mib),
        "--no-webui",
        *spec.server_args,
    ]


def require_installed(manifest: Manifest, paths: PoolPaths, names: list[str]) -> Path:
    """The llama-server binary, after checking it and the named models are installed."""
    binary = llama_server_binary()
    if binary is None:
        raise ProcessError(
            "llama-server is not installed: run `cascade models install` (or scripts/setup.sh)"
        )
    missing = [n for n in names if not model_is_installed(manifest.models[n], paths)]
    if missing:
        raise ProcessError(
            f"model(s) not installed: {', '.join(missing)}; run `cascade models install {' '.join(missing)}`"
        )
    return binary


def up(
    manifest: Manifest,
    paths: PoolPaths,
    names: list[str],
    options: ServerOptions,
    *,
    timeout_s: float = 120.0,
    say=print,
) -> dict[str, str]:
    """Start the named models' servers (already running ones are kept); wait until all are healthy.

    Returns {name: base_url}. On a start-up failure every server this call started is stopped; one
    that died keeps its pid file, with how it ended, for ``status``.
    """
    binary = require_installed(manifest, paths, names)
    started: list[tuple[str, int]] = []
    try:
        for name in names:
            spec = manifest.models[name]
            record = read_record(paths.pid_file(name))
            if record is not None:
                say(f"{name}: already running (pid {record.pid}, port {spec.port})")
                continue
            command = server_command(binary, paths.model_file(spec.file), name, spec, options)
            record = start_detached(command, paths.log_file(name), paths.pid_file(name), port=spec.port)
            started.append((name, record.pid))
            say(f"{name}: starting on port {spec.port} (pid {record.pid}, log {paths.log_file(name)})")
        for name, pid in started:
            spec = manifest.models[name]
            health = f"http://127.0.0.1:{spec.port}/health"
            waited = wait_healthy(
                health, pid=pid, log_path=paths.log_file(name), timeout_s=timeout_s, name=name
            )
            say(f"{name}: healthy after {waited:.1f}s at {base_url(spec)}")
    except BaseException:
        for name, pid in started:
            if not is_alive(pid):
                record_exit(paths.pid_file(name), pid)
                continue
            stop(pid, grace_s=5.0)
            paths.pid_file(name).unlink(missing_ok=True)
        raise
    return {name: base_url(manifest.models[name]) for name in names}


def down(manifest: Manifest, paths: PoolPaths, names: list[str], *, grace_s: float = 10.0, say=print) -> None:
    """Stop the named models' servers: SIGTERM, then SIGKILL after ``grace_s``."""
    for name in names:
        record = read_record(paths.pid_file(name))
        if record is None:
            paths.pid_file(name).unlink(missing_ok=True)  # a dead server's record: nothing to stop
            say(f"{name}: not running")
            continue
        outcome = stop(record.pid, grace_s=grace_s, executable=record.executable)
        paths.pid_file(name).unlink(missing_ok=True)
        say(f"{name}: {outcome} (pid {record.pid})")


def status(manifest: Manifest, paths: PoolPaths) -> list[ModelStatus]:
    """Installed / running state of every model of the manifest, and how a dead server ended."""
    rows = []
    for name, spec in manifest.models.items():
        installed = model_is_installed(spec, paths)
        record = load_record(paths.pid_file(name))
        if record is None:
            rows.append(ModelStatus(name, spec.port, installed, None))
        elif is_alive(record.pid, record.executable):
            rows.append(ModelStatus(name, spec.port, installed, record.pid))
        else:
            dead = death_report(record, paths.log_file(name))
            rows.append(ModelStatus(name, spec.port, installed, None, dead=dead))
    return rows


def run_foreground(
    manifest: Manifest,
    names: list[str],
    options: ServerOptions,
    paths: PoolPaths,
    *,
    timeout_s: float = 120.0,
) -> int:
    """Run the servers attached (output to this terminal, no pid files) until SIGTERM/SIGINT; stop them all.

    For containers: the pool home may be read-only. Returns an exit code (non-zero if one died).
    """
    import signal
    import subprocess
    import time

    binary = require_installed(manifest, paths, names)
    children: dict[str, subprocess.Popen[bytes]] = {}
    stopping = False

    def _request_stop(signum: int, _frame: object) -> None:
        nonlocal stopping
        stopping = True

    previous = {sig: signal.signal(sig, _request_stop) for sig in (signal.SIGTERM, signal.SIGINT)}
    try:
        for name in names:
            spec = manifest.models[name]
            command = server_command(binary, paths.model_file(spec.file), name, spec, options)
            children[name] = subprocess.Popen(command, stdin=subprocess.DEVNULL)
        while not stopping:
            dead = [(n, child.returncode) for n, child in children.items() if child.poll() is not None]
            if dead:
                ended = ", ".join(f"{n} exited with {describe_exit(code)}" for n, code in dead)
                print(f"error: {ended}", flush=True)
                return 1
            time.sleep(0.5)
        return 0
    finally:
        for child in children.values():
            if child.poll() is None:
                child.terminate()
        deadline = time.monotonic() + 10.0
        for child in children.values():
            try:
                child.wait(timeout=max(0.1, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                child.kill()
                child.wait()
        for sig, handler in previous.items():
            signal.signal(sig, handler)
