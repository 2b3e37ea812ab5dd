"""A committed prefix stream of the real 0.5B model, cut mid-answer, finished by the real 1.5B model.

`cascade serve` runs in front of the pool's two Qwen2.5-Coder servers with the prefix tiers of
tests/e2e/test_prefix_streams_local.py (tier ``accept`` commits to every prefix of its first 8
tokens). The 0.5B server is reached through a proxy that closes the connection after a fixed number
of stream events (tests/support/cutting_proxy.py: the seam of a network cut); the 1.5B server,
declared ``continue_assistant`` (llama-server continues a last assistant message), through one
that cuts nothing and records what it was asked. One request through the openai SDK, a short cap:
the client receives one stream whose text is the 0.5B's words up to the cut and the 1.5B's
continuation after them, and the charge of both calls. Run with ``-s`` to see the transcript.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import orjson
import pytest
from openai import OpenAI

from localpool.demo_cli import read_policy
from localpool.demo_config import pool_gateway_config, write_gateway_config
from money import Price
from money.charges import Attempt, attempt_charge, sent_bound
from policies import build_policy, save_policy
from tests.e2e.test_prefix_streams_local import CHEAP, FINAL, MESSAGES, PREFIX_TOKENS, policy_document
from tests.support.cutting_proxy import CuttingProxy, running_proxy
from tests.support.gateway_logs import request_lines
from tests.support.local_demo import serving_gateway
from tests.support.local_pool import LocalPool

pytestmark = pytest.mark.e2e

CUT_AFTER = 20  # stream events of the 0.5B relayed before the cut: its role chunk and 19 tokens
MAX_TOKENS = 48


def test_a_cut_committed_stream_of_the_0_5b_model_is_finished_by_the_1_5b_model(
    local_pool: LocalPool, repo_root: Path, tmp_path: Path
) -> None:
    policy = tmp_path / "policy.json"
    save_policy(build_policy(policy_document()), policy)
    _, names, _, _ = read_policy(policy)
    served = local_pool.serve(names)
    config = pool_gateway_config(served, names, policy)
    models = config["models"]
    assert models[FINAL]["capabilities"]["continue_assistant"] is True  # llama-server's, declared
    with (
        running_proxy(models[CHEAP]["base_url"].removesuffix("/v1"), cut_after=CUT_AFTER) as cheap,
        running_proxy(models[FINAL]["base_url"].removesuffix("/v1")) as final,
    ):
        models[CHEAP]["base_url"], models[FINAL]["base_url"] = cheap.base_url, final.base_url
        path = write_gateway_config(tmp_path / "gateway.yaml", config)
        with serving_gateway(path, tmp_path / "gateway.log", cwd=repo_root) as url:
            client = OpenAI(base_url=f"{url}/v1", api_key="unused", max_retries=0, timeout=600)
            raw = client.chat.completions.with_raw_response.create(
                model="cascade/accept",
                messages=MESSAGES,
                temperature=0,
                max_tokens=MAX_TOKENS,
                stream=True,
                stream_options={"include_usage": True},
            )
            chunks = list(raw.parse())
            request_id = raw.headers["x-request-id"]
            line = request_lines(tmp_path / "gateway.log", [request_id])[request_id]
        received = "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
        facts = chunks[-1].model_extra["cascade"]
        transcript(received, cheap.texts[0], final, chunks, line)
        assert line["continued_by"] == FINAL and line["cost_usd"] == pytest.approx(facts["cost_usd"])
        assert raw.headers["x-cascade-model"] == CHEAP  # sent at the start: the cheap model's stream
        sent = cheap.texts[0]  # what the 0.5B wrote before its connection was cut
        assert len(cheap.requests) == 1 and facts["commit"] == {"rule": "prefix", "tokens": PREFIX_TOKENS}
        assert facts["continued"] == {"model": FINAL, "after_tokens": CUT_AFTER - 1}
        assert facts["models_called"] == [CHEAP, FINAL]
        asked = final.requests[0]
        assert asked["messages"][-1] == {"role": "assistant", "content": sent}  # the prefill
        assert received.startswith(sent) and len(received) > len(sent)
        assert received == sent + final.texts[0].removeprefix(sent)  # llama-server repeats the prefill
        finishes = [c.choices[0].finish_reason for c in chunks if c.choices and c.choices[0].finish_reason]
        assert len(finishes) == 1 and len({c.id for c in chunks}) == 1
        # The cut call reported no usage: its worst case; the continuation: its usage.
        broken = sent_bound(Price(**models[CHEAP]["price"]), orjson.dumps(cheap.requests[0])).usd
        usage = chunks[-1].usage
        assert usage is not None
        continued = attempt_charge(
            Price(**models[FINAL]["price"]), Attempt(orjson.dumps(asked), usage=usage.model_dump())
        ).usd
        assert facts["cost_usd"] == pytest.approx(broken + continued)
        assert facts["cost_bound_usd"] == pytest.approx(broken)


def transcript(
    received: str, sent: str, final: CuttingProxy, chunks: list[Any], line: dict[str, Any]
) -> None:
    """What the client received, which part came from which model, and the charge (``-s``)."""
    facts = chunks[-1].model_extra["cascade"]
    finish = [c.choices[0].finish_reason for c in chunks if c.choices and c.choices[0].finish_reason]
    print("\n--- stream finish, e2e transcript ---")
    print(f"client received ({len(chunks)} chunks, one id, finish_reason {finish}): {received!r}")
    print(f"  from {CHEAP} (its connection cut after {CUT_AFTER} events): {sent!r}")
    print(f"  from {FINAL} (the continuation): {received[len(sent) :]!r}")
    print(f"{FINAL} was asked, last message: {json.dumps(final.requests[0]['messages'][-1])}")
    print(f"{FINAL} was asked max_tokens {final.requests[0].get('max_tokens')} (of {MAX_TOKENS})")
    print(f"{FINAL} streamed back (its raw content): {final.texts[0]!r}")
    print(f"client usage (the continuation's): {chunks[-1].usage}")
    keys = ("models_called", "commit", "continued", "cost_usd", "cost_bound_usd")
    print("final chunk cascade facts:", json.dumps({k: facts.get(k) for k in keys}))
    keys = ("models_called", "continued_by", "continued_after_tokens", "upstream_failures", "cost_usd")
    print("log line:", json.dumps({k: line.get(k) for k in (*keys, "cost_bound_usd")}))
