"""Run the gateway under uvicorn with a shutdown that drains in-flight requests first.

On SIGTERM/SIGINT uvicorn stops accepting connections and then waits for open ones. Before that
wait, ``DrainingServer`` starts the gateway's own drain (``Gateway.begin_drain``): requests get
``limits.shutdown_grace_s`` to finish, and the ones still open are then ended by the gateway itself
with an error the client can read (an SSE ``error`` event inside a stream) and their spend settled.
uvicorn's own cut-off is set a little later, so it never has to cancel requests blindly.

Once started, the process moves everything it holds (imported modules, settings, policy, sessions)
out of the garbage collector's sight (``gc.freeze``) and collects the youngest generation less
often: a request allocates thousands of short-lived containers (the parsed upstream body), and
with the default thresholds collections ran several times per request and kept re-walking
long-lived objects (docs/benchmarks.md, "Where the time goes").
"""

from __future__ import annotations

import contextlib
import gc
import socket
from typing import Any

import uvicorn

from gateway.api.app import create_app
from gateway.api.serving import gateway_http_protocol, uvicorn_log_config
from gateway.assembly.runtime import Gateway
from gateway.config.settings import Settings

# Time after the grace for cut requests to write their error and settle, before uvicorn gives up.
SETTLE_MARGIN_S = 5.0
# Allocations (net, of containers) between young-generation collections; Python's default is 700.
# Dead request objects are freed by reference counting anyway; only cycles wait for a collection.
GC_YOUNG_THRESHOLD = 50_000


def tune_gc_for_serving() -> None:
    """Freeze what start-up allocated and collect the young generation less often (see module doc)."""
    gc.collect()
    gc.freeze()
    _, middle, old = gc.get_threshold()
    gc.set_threshold(GC_YOUNG_THRESHOLD, middle, old)


class DrainingServer(uvicorn.Server):
    """A uvicorn server that starts the gateway's drain as soon as shutdown begins."""

    def __init__(self, config: uvicorn.Config, gateway: Gateway):
        super().__init__(config)
        self.gateway = gateway

    async def startup(self, sockets: list[socket.socket] | None = None) -> None:
        """uvicorn's start-up (lifespan, sockets), then ``tune_gc_for_serving``."""
        await super().startup(sockets)
        if self.started:
            tune_gc_for_serving()

    async def shutdown(self, sockets: list[socket.socket] | None = None) -> None:
        """Begin the gateway's drain, then uvicorn's shutdown (stop accepting, wait, lifespan)."""
        self.gateway.begin_drain()
        await super().shutdown(sockets)


def run(settings: Settings, host: str, port: int, **options: Any) -> None:
    """Serve ``settings`` on ``host:port`` (one process, uvloop + httptools) until SIGINT/SIGTERM.

    ``options`` override ``uvicorn.Config`` arguments (e.g. ``http``, ``log_config``). Exits with
    status 3 if the app failed to start (as ``uvicorn.run`` does).
    """
    app = create_app(settings)
    arguments: dict[str, Any] = {
        "host": host,
        "port": port,
        "loop": "uvloop",
        "http": gateway_http_protocol(settings.limits),
        "workers": 1,
        # Client addresses are read by the gateway alone, from `trusted_proxies`
        # (gateway.keys.client_address): uvicorn would otherwise believe X-Forwarded-For from
        # 127.0.0.1 (its default `forwarded_allow_ips`) and rewrite the peer before the app sees it.
        "proxy_headers": False,
        "lifespan": "on",
        "access_log": False,
        "log_level": "warning",
        "log_config": uvicorn_log_config("warning"),
        "timeout_graceful_shutdown": int(settings.limits.shutdown_grace_s + SETTLE_MARGIN_S) + 1,
        "server_header": False,
    }
    config = uvicorn.Config(app, **{**arguments, **options})
    server = DrainingServer(config, app.state.gateway)
    # uvicorn re-raises the SIGINT it handled once done: a clean stop (as in uvicorn.run).
    with contextlib.suppress(KeyboardInterrupt):
        server.run()
    if not server.started:
        raise SystemExit(3)  # uvicorn's exit status when the app failed to start
