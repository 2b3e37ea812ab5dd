"""What a key limited to 10 requests a minute is admitted when Redis pauses for 250 ms mid-burst.

Real gateway apps (in process, the scripted upstream through the in-process transport) share a
private redis-server (default config: ``redis_timeout_s`` 0.1). Two cases, each repeated on a fresh
key:

* ``two replicas``: 40 requests: 4 one by one, then ``CLIENT PAUSE 250 ALL``, then 36 at once,
  round-robin over two replicas;
* ``one replica``: 30 requests: 5 one by one, then the pause, then 25 at once.

Printed per run: the requests admitted (200) in the window, what Redis counted for the window once
the replicas reconciled, and how often a replica entered degraded mode. Run from the repository
root (``PYTHONPATH=<other tree>:.`` measures another tree's gateway with this script):

    PYTHONPATH=. .venv/bin/python bench/gateway/redis_pause_limits.py [--repeat 3] [--pause-ms 250]
"""

from __future__ import annotations

import argparse
import os
import tempfile
import time
from pathlib import Path

from tests.reliability.processes import RedisServer
from tests.reliability.redis_pause import (
    all_live,
    burst,
    client_pause,
    degraded_entries,
    fallbacks,
    in_one_window,
    rate_requests,
    rated_replicas,
)
from tests.support.scripted_upstream import running_upstream

RPM = 10
CASES = {"two replicas": (2, 40, 4), "one replica": (1, 30, 5)}  # replicas, requests, before the pause


def settled_count(server: RedisServer, key: str, timeout_s: float = 8.0) -> int:
    """What Redis counts for the window once it stops changing for 2 s (the replicas reconcile
    about once a second)."""
    last, stable_since, deadline = -1, time.monotonic(), time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        now = rate_requests(server, key)
        if now != last:
            last, stable_since = now, time.monotonic()
        elif time.monotonic() - stable_since >= 2.0:
            break
        time.sleep(0.1)
    return last


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--pause-ms", type=int, default=250)
    args = parser.parse_args()
    keys = [f"sk-pause-{i}" for i in range(args.repeat * len(CASES))]
    os.environ["CASCADE_API_KEYS"] = ",".join(keys)
    os.environ.pop("CASCADE_REDIS_PREFIX", None)
    server = RedisServer()
    server.start()
    try:
        with running_upstream() as upstream, tempfile.TemporaryDirectory() as workdir:
            for case, (n, count, before) in CASES.items():
                replicas = rated_replicas(n, server.url, upstream, Path(workdir), requests=RPM)
                try:
                    all_live(replicas)  # (a tree without the heartbeat never says so: go on after 5 s)
                    for _ in range(args.repeat):
                        key = keys.pop()
                        entries = sum(degraded_entries(r) for r in replicas)
                        local = sum(fallbacks(r) for r in replicas)
                        in_one_window(margin_s=15)
                        statuses = burst(
                            replicas,
                            key,
                            count,
                            before=before,
                            pause=lambda: client_pause(server, args.pause_ms / 1000),
                        )
                        counted = settled_count(server, key)
                        print(
                            f"{case}: {count} requests, rpm {RPM}, {args.pause_ms} ms pause: admitted "
                            f"{statuses.count(200)} (429: {statuses.count(429)}), Redis counted {counted}; "
                            f"degraded entries {sum(map(degraded_entries, replicas)) - entries:.0f}, "
                            f"requests decided without Redis {sum(map(fallbacks, replicas)) - local:.0f}"
                        )
                finally:
                    for replica in replicas:
                        replica.stop()
    finally:
        server.stop()


if __name__ == "__main__":
    main()
