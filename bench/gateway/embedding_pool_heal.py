"""A ``minilm-v1`` routed tier at boot and after its embedding worker is killed, through `cascade serve`.

One real gateway process (no Redis) in front of the tests' scripted upstream, serving the test
policy whose tier ``balanced`` is routed by a ``minilm-v1`` router (tests/support/routed_policy.py).
Each request is one chat completion to ``cascade/balanced``, sent one at a time; its mechanism is
its ``x-cascade-mechanism`` header and a fallback's reason the ``cascade_router_fallbacks_total``
sample that grew. Printed:

* boot: seconds until ``/healthz`` answers, the first request's mechanism (and reason), seconds
  until ``/readyz`` answers 200 and the first request sent after that;
* heal: the embedding worker (the gateway's child process running ``multiprocessing``'s spawn
  entry point, from /proc) is sent SIGKILL, then requests are sent for at most ``--seconds``:
  how many, their mechanisms and fallback reasons, and the seconds from the kill to the first
  routed answer (or none).

    PYTHONPATH=$PWD .venv/bin/python bench/gateway/embedding_pool_heal.py [--seconds 30]
"""

from __future__ import annotations

import argparse
import collections
import os
import signal
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[2]
sys.path[:0] = [str(REPO), str(REPO / "tests" / "reliability")]

from processes import write_gateway_config  # noqa: E402

from tests.support.gateway_process import GatewayProcess  # noqa: E402
from tests.support.policy_files import write_policy  # noqa: E402
from tests.support.routed_policy import EASY, ROUTED, router_section  # noqa: E402
from tests.support.scripted_upstream import ScriptedUpstream, ok  # noqa: E402

FALLBACKS = "cascade_router_fallbacks_total"


def fallback_counts(gateway: GatewayProcess) -> dict[str, float]:
    """``cascade_router_fallbacks_total`` of tier ``balanced`` by reason."""
    family = gateway.metrics().get("cascade_router_fallbacks")
    samples = family.samples if family is not None else []
    return {s.labels["reason"]: s.value for s in samples if s.name == FALLBACKS}


def one_request(gateway: GatewayProcess) -> str:
    """Send one request; its mechanism, with the fallback's reason (``fallback:error``)."""
    before = fallback_counts(gateway)
    reply = gateway.client().chat.completions.with_raw_response.create(
        model="cascade/balanced", messages=EASY
    )
    mechanism = reply.headers["x-cascade-mechanism"]
    if mechanism != "fallback":
        return mechanism
    after = fallback_counts(gateway)
    grown = [reason for reason, value in after.items() if value > before.get(reason, 0.0)]
    return f"fallback:{','.join(grown) or '?'}"


def embedding_workers(pid: int) -> list[int]:
    """The children of ``pid`` started by multiprocessing's spawn (not its resource tracker)."""
    children: list[int] = []
    for task in Path(f"/proc/{pid}/task").iterdir():
        children += [int(c) for c in (task / "children").read_text().split()]
    workers = []
    for child in children:
        cmdline = Path(f"/proc/{child}/cmdline").read_bytes().replace(b"\0", b" ")
        if b"spawn_main" in cmdline and b"resource_tracker" not in cmdline:
            workers.append(child)
    return workers


def boot(gateway: GatewayProcess) -> None:
    """The boot half: healthz, the first request, readyz, the first request after it."""
    started = time.monotonic()
    gateway.start().wait_ready(path="/healthz")
    print(f"boot: /healthz 200 after {time.monotonic() - started:.2f} s")
    print(f"boot: first request at once: {one_request(gateway)}")
    while gateway.get("/readyz").status_code != 200:
        time.sleep(0.05)
    print(f"boot: /readyz 200 after {time.monotonic() - started:.2f} s")
    print(f"boot: first request after /readyz: {one_request(gateway)}")


def heal(gateway: GatewayProcess, seconds: float) -> None:
    """The heal half: wait for a routed answer, kill the worker, send requests until routed again."""
    deadline = time.monotonic() + 120
    while one_request(gateway) != "routed":
        if time.monotonic() > deadline:
            raise SystemExit("no routed answer within 120 s of boot")
    (worker,) = embedding_workers(gateway.pid)
    os.kill(worker, signal.SIGKILL)
    killed = time.monotonic()
    outcomes: collections.Counter[str] = collections.Counter()
    healed_after: float | None = None
    while time.monotonic() - killed < seconds:
        outcome = one_request(gateway)
        outcomes[outcome] += 1
        if outcome == "routed":
            healed_after = time.monotonic() - killed
            break
        time.sleep(0.05)  # a client's pace, not a synchronisation
    print(f"heal: worker {worker} killed; {sum(outcomes.values())} requests: {dict(outcomes)}")
    if healed_after is None:
        print(f"heal: no routed answer within {seconds:.0f} s of the kill")
    else:
        print(f"heal: first routed answer {healed_after:.2f} s after the kill")
    print(f"heal: workers now {embedding_workers(gateway.pid)}")


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--seconds", type=float, default=30.0, help="how long to wait for the heal")
    args = parser.parse_args(argv)
    upstream = ScriptedUpstream()
    upstream.start()
    upstream.set_default("up-small", ok("4", confidence=0.99))
    upstream.set_default("up-large", ok("4", confidence=0.99))
    router: dict[str, Any] = router_section("minilm-v1")
    with tempfile.TemporaryDirectory() as directory:
        root = Path(directory)
        policy = write_policy(
            root / "policy.json", tier_changes={"balanced": {"routing": ROUTED}}, router=router
        )
        config = write_gateway_config(
            root, upstream_base_url=upstream.base_url, policy=policy, auth={"open": True}
        )
        gateway = GatewayProcess(config)
        try:
            boot(gateway)
            heal(gateway, args.seconds)
        finally:
            gateway.stop()
            upstream.stop()
            with_restart = [line for line in gateway.logs() if "embedding" in str(line.get("event"))]
            for line in with_restart:
                print("log:", {k: v for k, v in line.items() if k not in ("ts", "level")})


if __name__ == "__main__":
    main()
