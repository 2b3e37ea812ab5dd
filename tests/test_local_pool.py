"""The session's local pool (tests/support/local_pool.py) starts each model's server once, whatever
the modules ask for, on free ports, and stops them all at the end.

The seam is the llama-server binary (``llama_server_binary``): a stand-in that answers ``/health``
on the port it is given, so this runs without the real models.
"""

from __future__ import annotations

import sys
from pathlib import Path

import httpx
import pytest

from localpool.process import is_alive, load_record
from tests.support import local_pool as pool_plugin

FAKE_SERVER = f"""#!{sys.executable}
import sys
from http.server import BaseHTTPRequestHandler, HTTPServer

class Health(BaseHTTPRequestHandler):
    def do_GET(self):
        self.send_response(200 if self.path == "/health" else 404)
        self.end_headers()

HTTPServer(("127.0.0.1", int(sys.argv[sys.argv.index("--port") + 1])), Health).serve_forever()
"""


@pytest.fixture
def pool(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, repo_root: Path) -> pool_plugin.LocalPool:
    binary = tmp_path / "llama-server"
    binary.write_text(FAKE_SERVER)
    binary.chmod(0o755)
    monkeypatch.setattr(pool_plugin, "llama_server_binary", lambda: binary)
    monkeypatch.setattr(pool_plugin, "model_is_installed", lambda spec, paths: True)
    monkeypatch.setattr(pool_plugin, "STARTED", [])
    return pool_plugin.LocalPool(repo_root, tmp_path / "pool")


def test_each_models_server_starts_once_on_a_free_port_and_stops_at_the_end(
    pool: pool_plugin.LocalPool,
) -> None:
    manifest = pool.manifest
    try:
        first = pool.serve(["qwen0.5b-fast", "qwen1.5b-think"])  # members: their models' servers
        second = pool.serve(["qwen2.5-coder-0.5b", "smollm2-135m", "qwen1.5b-fast"])
        assert pool_plugin.STARTED == ["qwen2.5-coder-0.5b", "qwen2.5-coder-1.5b", "smollm2-135m"]
        for name in ("qwen2.5-coder-0.5b", "qwen2.5-coder-1.5b"):  # the same server the second time
            assert second.models[name].port == first.models[name].port != manifest.models[name].port
        for name in pool_plugin.STARTED:
            assert httpx.get(f"{pool.url(name)}/health", timeout=5).status_code == 200
        records = [load_record(pool.work / f"{name}.pid") for name in pool_plugin.STARTED]
        pids = [record.pid for record in records if record is not None]
        assert len(pids) == 3
    finally:
        pool.close()
    assert not any(is_alive(pid) for pid in pids)
