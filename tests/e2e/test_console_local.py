"""The console in front of the real models: a request the demo policy escalates is found by its
``x-request-id`` on its console page, with both stages.

The demo's own config and default policy (``running_demo``, the session's real pool on free ports)
with the console enabled and the admin key set; one request, the one
test_demo_serves_requests.py shows escalating deterministically: a list the fast member's 8-token cap
cuts (``truncated``) on the economy tier.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
from openai import OpenAI

from tests.support.local_demo import running_demo
from tests.support.local_pool import LocalPool

pytestmark = pytest.mark.e2e

ADMIN_KEY = "e2e-console-admin"


@pytest.fixture(scope="module")
def demo_url(
    local_pool: LocalPool, repo_root: Path, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[str]:
    """The demo with the console on (records in the gateway's ring: the demo has no Redis)."""
    with pytest.MonkeyPatch.context() as env:
        env.setenv("CASCADE_ADMIN_KEY", ADMIN_KEY)  # `cascade serve` inherits it
        work = tmp_path_factory.mktemp("console-demo")
        with running_demo(local_pool, repo_root, work, config_changes={"console": {"enabled": True}}) as demo:
            yield demo.url


def test_an_escalated_request_is_found_by_its_id_with_both_stages(demo_url: str) -> None:
    client = OpenAI(base_url=f"{demo_url}/v1", api_key="unused", max_retries=0, timeout=300)
    raw = client.chat.completions.with_raw_response.create(
        model="cascade/economy",
        messages=[{"role": "user", "content": "Write the numbers from 1 to 30, separated by commas."}],
        temperature=0,
    )
    assert raw.headers["x-cascade-models-called"] == "qwen0.5b-fast,qwen1.5b-fast", raw.headers
    request_id = raw.headers["x-request-id"]

    page = httpx.get(
        f"{demo_url}/console/requests/{request_id}",
        headers={"authorization": f"Bearer {ADMIN_KEY}"},
        timeout=30,
    )
    assert page.status_code == 200, page.text[:500]
    stages = page.text.split('aria-label="Stages"', 1)[1].split("</table>", 1)[0]
    rows = [re.sub(r"<[^>]+>|\s+", " ", row) for row in stages.split("<tr>")[2:]]
    assert len(rows) == 2, rows
    assert "qwen0.5b-fast" in rows[0] and " escalated " in rows[0] and " truncated " in rows[0], rows[0]
    assert "qwen1.5b-fast" in rows[1] and " answered " in rows[1], rows[1]
    assert f"<code>{request_id}</code>" in page.text
    listed = httpx.get(
        f"{demo_url}/console/requests?tier=economy",
        headers={"authorization": f"Bearer {ADMIN_KEY}"},
        timeout=30,
    )
    assert f"/console/requests/{request_id}" in listed.text
