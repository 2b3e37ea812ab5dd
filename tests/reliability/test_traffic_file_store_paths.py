"""`learning.store` on a path that is not a regular file, against a real `cascade serve`.

Reading ``/dev/full`` (or ``/dev/zero``, or a FIFO) never ends: a gateway that indexed such a
"file" grew by a gigabyte every few seconds. It must refuse to start, with one line naming the path
and what it is, and exit 2 like any config it cannot start with.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from processes import write_gateway_config

from tests.support.gateway_process import GatewayProcess

EXIT_WAIT_S = 60.0


def _serve_with_store(tmp_path: Path, upstream, policy_path: Path, store: str) -> GatewayProcess:
    config = write_gateway_config(
        tmp_path,
        upstream_base_url=upstream.base_url,
        policy=policy_path,
        learning={"enabled": True, "sample_rate": 1.0, "store": store},
    )
    return GatewayProcess(config).start()


@pytest.mark.parametrize(
    ("make_path", "kind"),
    [
        pytest.param(lambda tmp: "/dev/full", "a character device", id="/dev/full"),
        pytest.param(lambda tmp: f"file://{tmp}/fifo", "a FIFO", id="a FIFO"),
        pytest.param(lambda tmp: str(tmp), "a directory", id="a directory"),
    ],
)
def test_a_store_path_that_is_not_a_regular_file_stops_the_start_with_one_line(
    tmp_path: Path, upstream, policy_path: Path, make_path, kind: str
) -> None:
    os.mkfifo(tmp_path / "fifo")
    store = make_path(tmp_path)
    gateway = _serve_with_store(tmp_path, upstream, policy_path, store)
    try:
        status = gateway.wait(EXIT_WAIT_S)
    finally:
        gateway.stop()
    lines = gateway.log_text().strip().splitlines()
    assert status == 2, lines[-5:]
    assert len(lines) == 1, lines
    assert lines[0].startswith("error: ")
    assert f"is {kind}, not a regular file" in lines[0]
    assert "Traceback" not in gateway.log_text()
