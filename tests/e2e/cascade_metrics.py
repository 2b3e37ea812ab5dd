"""The gateway's requests by outcome, read from its ``/metrics`` (test_local_cascade.py and
test_messages_local_cascade.py)."""

from __future__ import annotations

from typing import Any

import httpx
from prometheus_client.parser import text_string_to_metric_families


def metric_families(url: str) -> dict[str, Any]:
    """The gateway's ``/metrics`` at ``url``, parsed: family name -> family."""
    return {f.name: f for f in text_string_to_metric_families(httpx.get(f"{url}/metrics").text)}


def requests_by_outcome(families: dict[str, Any], endpoint: str, tier: str | None = None) -> dict[str, float]:
    """``cascade_requests_total`` of ``endpoint`` (and of ``tier`` if given), outcome -> count."""
    return {
        s.labels["outcome"]: s.value
        for s in families["cascade_requests"].samples
        if s.name == "cascade_requests_total"
        and s.labels.get("endpoint") == endpoint
        and (tier is None or s.labels.get("tier") == tier)
    }
