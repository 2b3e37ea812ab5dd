"""The session's real local pool: one llama-server per pool model, shared by every test that needs one.

A pytest plugin (registered in tests/conftest.py):

* ``local_pool`` (session): a ``LocalPool``. ``local_pool.serve(names)`` returns the pool manifest
  with the servers of these pool models or members running on free ports (never the manifest's, so
  that a test does not collide with a demo someone runs on the same machine). A server is started
  the first time a test asks for it and stopped when the session ends, so no model's server starts
  twice in a run, and a later test finds llama-server's prompt cache warm. A model not installed
  yet (the optional 1.5B one) is installed first, as ``cascade demo`` does.
* Every test that uses ``local_pool`` (directly or through a fixture) is marked ``e2e``, so that
  ``-m 'not e2e'`` (``scripts/test.sh --fast``) leaves it out.
* The run's summary says how many llama-server processes the pool started, and which (a run that
  starts one model's server twice is a regression: ``grep 'local pool:'`` in the output).

Needs scripts/setup.sh (llama-server and the models, in ``$CASCADE_HOME`` or the repository's
``.cascade``).
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path

import pytest

from localpool.install import install_model, model_is_installed
from localpool.manifest import DEFAULT_MANIFEST, Manifest, load_manifest
from localpool.paths import PoolPaths
from localpool.pool import ServerOptions, server_command
from localpool.process import start_detached, stop, wait_healthy
from localpool.server_build import llama_server_binary
from tests.support.ports import free_port

# The cores are split as for a demo of two servers (ServerOptions.from_env: threads = cores / servers):
# a test drives at most two servers at once (a cascade's stages), and a server the test does not
# call only waits (llama-server's threads spin while a job runs, not while the server is idle).
SERVERS_AT_ONCE = 2
# The servers each pool start has started in this process (read by the summary at the end).
STARTED: list[str] = []


def pool_paths(repo_root: Path) -> PoolPaths:
    """Where scripts/setup.sh installed the pool: ``$CASCADE_HOME`` or the repository's ``.cascade``."""
    home = os.environ.get("CASCADE_HOME")
    return PoolPaths(Path(home) if home else repo_root / ".cascade")


class LocalPool:
    """The session's llama-servers on free ports; ``serve`` starts the missing ones."""

    def __init__(self, repo_root: Path, work: Path) -> None:
        """A pool with nothing running yet; servers' logs and pid files go to ``work``."""
        self.paths = pool_paths(repo_root)
        self.work = work
        self.manifest = load_manifest()
        self.logs: dict[str, Path] = {}  # server name -> its llama-server log
        self._pids: dict[str, int] = {}

    def serve(self, names: list[str]) -> Manifest:
        """The manifest with the servers of ``names`` (pool models or members) running on their free
        ports (the ports of servers not asked for are the manifest's: do not call them)."""
        servers = self.manifest.servers_for(names)
        binary = llama_server_binary()
        if binary is None:
            pytest.fail("llama-server is not installed; run scripts/setup.sh")
        options = ServerOptions.from_env(servers=SERVERS_AT_ONCE)
        for name in (s for s in servers if s not in self._pids):
            spec = self.manifest.models[name]
            if not model_is_installed(spec, self.paths):
                install_model(name, spec, self.paths, print, manifest_path=DEFAULT_MANIFEST)
            spec = spec.model_copy(update={"port": free_port()})
            log = self.logs[name] = self.work / f"{name}.log"
            command = server_command(binary, self.paths.model_file(spec.file), name, spec, options)
            record = start_detached(command, log, self.work / f"{name}.pid", port=spec.port)
            self._pids[name] = record.pid
            STARTED.append(name)
            wait_healthy(
                f"http://127.0.0.1:{spec.port}/health", pid=record.pid, log_path=log, timeout_s=180, name=name
            )
            models = {**self.manifest.models, name: spec}
            self.manifest = self.manifest.model_copy(update={"models": models})
        return self.manifest

    def url(self, name: str) -> str:
        """The base URL (``http://127.0.0.1:PORT``) of a server ``serve`` started."""
        assert name in self._pids, f"{name} is not served by the local pool"
        return f"http://127.0.0.1:{self.manifest.models[name].port}"

    def close(self) -> None:
        """Stop every server the pool started."""
        for pid in self._pids.values():
            stop(pid, grace_s=10)
        self._pids.clear()


@pytest.fixture(scope="session")
def local_pool(repo_root: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalPool]:
    """The session's real local pool (see the module docstring)."""
    pool = LocalPool(repo_root, tmp_path_factory.mktemp("local-pool"))
    try:
        yield pool
    finally:
        pool.close()


@pytest.hookimpl(tryfirst=True)  # before -m deselects: the mark must be there when it looks
def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """Mark ``e2e`` every test that uses the real local pool, whatever its module says."""
    for item in items:
        if "local_pool" in getattr(item, "fixturenames", ()):
            item.add_marker(pytest.mark.e2e)


def pytest_terminal_summary(terminalreporter: pytest.TerminalReporter) -> None:
    """One line: the llama-server processes the session's pool started (none: no line)."""
    if STARTED:
        terminalreporter.write_line(f"local pool: {len(STARTED)} llama-server starts ({', '.join(STARTED)})")
