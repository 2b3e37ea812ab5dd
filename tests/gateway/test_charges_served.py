"""What a served call is charged when its answer reports no usage (the rule: money/charges.py).

Through the app with the official SDK: a per-token-priced model whose upstream omits usage is
charged an estimate at or above what the upstream bills, never $0.
"""

from __future__ import annotations

from collections.abc import Callable

import orjson

from tests.support.scripted_upstream import ok


def test_an_answer_without_usage_is_charged_no_less_than_the_upstream_bills(
    start_gateway: Callable, upstream
) -> None:
    upstream.set_default("up-small", ok("Paris", confidence=0.99, usage=None))
    running = start_gateway()
    raw = running.client().chat.completions.with_raw_response.create(
        model="cascade", messages=[{"role": "user", "content": "Capital of France?"}], max_tokens=8
    )
    assert raw.headers["x-cascade-models-called"] == "small"
    assert raw.parse().usage is None  # the client sees what the upstream sent
    (billed,) = upstream.produced
    billed_usd = (billed.prompt_tokens * 0.1 + billed.completion_tokens * 0.2) / 1e6
    charged = float(raw.headers["x-cascade-cost-usd"])
    assert charged >= billed_usd > 0
    (call,) = upstream.calls("up-small")
    sent_bytes = len(orjson.dumps(call.body))
    assert charged <= (sent_bytes * 2 * 0.1 + 8 * 0.2) / 1e6  # the reservation's bound, roughly
