"""Probe (run by hand): a slow-starting cheap stage, a slow but started one, and a reset attempt,
through a real `cascade serve` in front of the scripted upstream on loopback.

The test policy's ``balanced`` tier (small -> large at 0.5); small's ``timeout_s`` is 30 s, and with
``--first-token-s S`` it has ``first_token_timeout_s: S`` (leave it out to probe a gateway without
the setting). One non-streamed chat request per case, through the official openai SDK:

* slow_start: small would answer confidently, but its answer starts after ``--delay-s`` seconds;
* slow_but_started: small's first token comes at once, then 40 more one every 50 ms (2 s in all);
* reset: small drops the connection after reading the request (large answers).

After one warm-up request, prints, per case: the wall time to the answer, the model that answered,
the escalation reason, and the ``x-cascade-cost*`` headers.

    PYTHONPATH=$PWD .venv/bin/python bench/gateway/first_token_probe.py --first-token-s 0.5
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO / "tests" / "reliability"))

from processes import write_gateway_config  # noqa: E402

from tests.support.gateway_process import GatewayProcess  # noqa: E402
from tests.support.gateway_testkit import model_configs  # noqa: E402
from tests.support.policy_files import write_policy  # noqa: E402
from tests.support.scripted_upstream import Reply, ScriptedUpstream, ok, running_upstream  # noqa: E402

LONG = " ".join(["word"] * 40)


def cases(delay_s: float) -> dict[str, Reply]:
    """small's reply in each case."""
    return {
        "slow_start": ok(delay_s=delay_s),
        "slow_but_started": ok(LONG, chunk_delay_s=0.05),
        "reset": ok(drop_connection=True),
    }


def probe(gateway: GatewayProcess, upstream: ScriptedUpstream, name: str, reply: Reply) -> None:
    """One request with small scripted ``reply``: what it took and what it reported."""
    upstream.reset()
    upstream.set_default("up-small", reply)
    started = time.monotonic()
    raw = gateway.client(timeout_s=60).chat.completions.with_raw_response.create(
        model="cascade", messages=[{"role": "user", "content": "What is the capital of France?"}]
    )
    seconds = time.monotonic() - started
    headers = {k: v for k, v in raw.headers.items() if k.startswith("x-cascade-cost")}
    print(
        f"{name:17} {seconds:6.2f}s model={raw.headers['x-cascade-model']:6} "
        f"reason={raw.headers['x-cascade-escalation-reason']:17} {headers}"
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--first-token-s", type=float, default=None)
    parser.add_argument("--delay-s", type=float, default=3.0)
    args = parser.parse_args()
    with running_upstream() as upstream, tempfile.TemporaryDirectory() as tmp:
        directory = Path(tmp)
        models: dict[str, Any] = model_configs(upstream.base_url)
        models["small"]["timeout_s"] = 30
        if args.first_token_s is not None:
            models["small"]["first_token_timeout_s"] = args.first_token_s
        config = write_gateway_config(
            directory,
            upstream_base_url=upstream.base_url,
            policy=write_policy(directory / "policy.json"),
            models=models,
            auth={"open": True},
        )
        gateway = GatewayProcess(config).start().wait_ready()
        try:
            gateway.client().models.list()  # warm: the first request of a process pays its imports
            probe(gateway, upstream, "warm-up", ok())
            for name, reply in cases(args.delay_s).items():
                probe(gateway, upstream, name, reply)
        finally:
            gateway.stop()


if __name__ == "__main__":
    main()
