"""The transport seam of the upstream calls: what opens the aiohttp session a client sends through.

An ``UpstreamClient`` sends every request through one ``aiohttp.ClientSession`` that it opens in
``start()`` with a ``SessionOpener``. The default, ``open_pooled_session``, is the production one: a
keep-alive TCP pool. Another opener (``gateway.upstream.in_process.InProcessUpstreams``) gives a
session whose connections reach an aiohttp application in this process through memory pipes instead
of sockets. The seam sits where the session is made, not on the request path: a request costs the
same attribute lookup (``self._session``) whichever opener made the session, and every answer,
timeout and broken connection is aiohttp's own.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable

import aiohttp
import orjson

from gateway.config.settings import ModelConfig

SessionOpener = Callable[[ModelConfig], Awaitable[aiohttp.ClientSession]]
"""Opens the session a model's client sends through (called once, inside the running loop)."""


def _json_dumps(value: object) -> str:
    return orjson.dumps(value).decode()


async def open_pooled_session(config: ModelConfig) -> aiohttp.ClientSession:
    """The production session: keep-alive TCP connections, reused across requests, up to 512."""
    connector = aiohttp.TCPConnector(limit=512, keepalive_timeout=60, enable_cleanup_closed=True)
    return session_over(connector)


def session_over(connector: aiohttp.BaseConnector) -> aiohttp.ClientSession:
    """A client session over ``connector`` with the gateway's settings (orjson bodies, no raising
    on error statuses: every status is the client's to judge)."""
    return aiohttp.ClientSession(connector=connector, json_serialize=_json_dumps, raise_for_status=False)
