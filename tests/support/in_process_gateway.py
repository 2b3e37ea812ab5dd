"""The gateway app driven in-process, its upstream reached through the transport seam: no socket.

``serve_in_process(app)`` runs the app's lifespan on a loop in a thread (tests/support/asgi_bridge.py)
and returns an ``InProcessGateway``, the in-process twin of ``RunningGateway``
(tests/support/gateway_testkit.py): the same ``app``, ``gateway``, ``client()``, ``async_client()``
(the official OpenAI SDK over an in-process httpx transport), ``readiness()``, ``metrics()`` and
``sample()``, plus ``http`` (an httpx client of the app, for the raw requests a test would send to
``url``) and ``anthropic_http_client()`` (for the anthropic SDK's ``http_client=``).
``scripted_transport(upstream)`` is the ``SessionOpener``
(gateway.upstream.transport) that reaches the scripted upstream in memory on the app's own loop,
so an upstream fault (a cut body, a stall, a dropped connection) is the same aiohttp event it is
over loopback. Keep a real socket where the socket is the point (see tests/gateway/conftest.py).
"""

from __future__ import annotations

from types import ModuleType
from typing import Any

import anthropic
import httpx
import httpx2
from openai import AsyncOpenAI, OpenAI

from gateway.upstream.in_process import InProcessUpstreams
from tests.support.asgi_bridge import AppLoop, transports
from tests.support.gateway_testkit import ADMIN_KEY, MetricsView
from tests.support.scripted_upstream import ScriptedUpstream

# The address an in-process gateway answers as (no socket listens there).
IN_PROCESS_URL = "http://gateway.in-process"
_SERVER = ("gateway.in-process", 80)


def scripted_transport(upstream: ScriptedUpstream) -> InProcessUpstreams:
    """Upstream sessions reaching ``upstream`` in memory (by its base URL; others go over TCP)."""
    return InProcessUpstreams({upstream.base_url: upstream.application})


class InProcessGateway(MetricsView):
    """The app served in-process; what a test used of a ``RunningGateway``, without the socket."""

    def __init__(self, app: Any, app_loop: AppLoop):
        self.app = app
        self.app_loop = app_loop
        self.url = IN_PROCESS_URL
        self.http = self.http_client()

    @property
    def gateway(self) -> Any:
        """The app's ``gateway.api.app.Gateway`` (metrics, pool, shared state)."""
        return self.app.state.gateway

    def http_client(self, package: ModuleType = httpx, **kw: Any) -> Any:
        """A sync client of the app (base URL set: pass paths), of ``package`` (httpx or httpx2)."""
        kw.setdefault("timeout", 20)
        transport = transports(package)[0](self.app_loop, _SERVER)
        return package.Client(transport=transport, base_url=self.url, **kw)

    def async_http_client(self, package: ModuleType = httpx, **kw: Any) -> Any:
        """An async client of the app, for use on the caller's own loop, of ``package``."""
        kw.setdefault("timeout", 20)
        transport = transports(package)[1](self.app_loop, _SERVER)
        return package.AsyncClient(transport=transport, base_url=self.url, **kw)

    def anthropic_http_client(self) -> Any:
        """The ``http_client`` for an ``anthropic.Anthropic`` of the app (the SDK takes httpx2's)."""
        return self.http_client(httpx2)

    def async_anthropic_http_client(self) -> Any:
        """The ``http_client`` for an ``anthropic.AsyncAnthropic`` of the app."""
        return self.async_http_client(httpx2)

    def client(self, api_key: str = "none", **kw: Any) -> OpenAI:
        """Official sync SDK client (no retries, short timeout), in-process."""
        return OpenAI(**_sdk_options(self.url + "/v1", api_key, self.http_client()), **kw)

    def async_client(self, api_key: str = "none", **kw: Any) -> AsyncOpenAI:
        """Official async SDK client (no retries, short timeout), in-process."""
        return AsyncOpenAI(**_sdk_options(self.url + "/v1", api_key, self.async_http_client()), **kw)

    def anthropic_client(self, api_key: str = "none", **kw: Any) -> anthropic.Anthropic:
        """The anthropic SDK (it appends /v1/messages) of the app: no retries, short timeout."""
        return anthropic.Anthropic(**_sdk_options(self.url, api_key, self.anthropic_http_client()), **kw)

    def async_anthropic_client(self, api_key: str = "none", **kw: Any) -> anthropic.AsyncAnthropic:
        """The async anthropic SDK of the app: no retries, short timeout."""
        return anthropic.AsyncAnthropic(
            **_sdk_options(self.url, api_key, self.async_anthropic_http_client()), **kw
        )

    def readiness(self, admin_key: str = ADMIN_KEY) -> httpx.Response:
        """``GET /readyz`` with the admin key: the detailed view (policy, Redis, upstreams)."""
        return self.http.get("/readyz", headers={"authorization": f"Bearer {admin_key}"})

    def metrics_text(self) -> str:
        return self.http.get("/metrics").text

    def stop(self) -> None:
        """Close the clients and run the app's shutdown."""
        self.http.close()
        self.app_loop.stop()


def _sdk_options(base_url: str, api_key: str, http_client: Any) -> dict[str, Any]:
    """What an SDK client of the app is made with: no retries, a short timeout."""
    return {
        "base_url": base_url,
        "api_key": api_key,
        "max_retries": 0,
        "timeout": 20,
        "http_client": http_client,
    }


def serve_in_process(app: Any) -> InProcessGateway:
    """Run ``app``'s lifespan on a loop in a thread and return it, reachable without a socket."""
    app_loop = AppLoop(app)
    app_loop.start()
    return InProcessGateway(app, app_loop)
