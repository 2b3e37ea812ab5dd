"""Cost of the gateway's HTTP protocol bounds (gateway.api.serving) per request, against plain uvicorn.

Drives uvicorn's ``HttpToolsProtocol`` and the gateway's subclass in one process, on one uvloop
loop, with an in-memory transport and a minimal ASGI app that reads the body and answers 200: each
request is one socket read holding a typical completion request (8 headers, a 200-byte JSON body)
on a keep-alive connection. Rounds alternate between the two classes (paired, so a drift of the
machine's load hits both); the result is the median per-request time of each and their difference.

    .venv/bin/python bench/gateway/protocol_bench.py --requests 20000 --rounds 7
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import time
from typing import Any

import uvloop
from uvicorn.config import Config
from uvicorn.protocols.http.httptools_impl import HttpToolsProtocol
from uvicorn.server import ServerState

from gateway.api.serving import gateway_http_protocol
from gateway.config.settings import LimitsConfig

BODY = b'{"model": "cascade", "messages": [{"role": "user", "content": "' + b"x" * 140 + b'"}]}'
REQUEST = (
    b"POST /v1/chat/completions HTTP/1.1\r\nhost: 127.0.0.1:8000\r\naccept-encoding: gzip, deflate\r\n"
    b"connection: keep-alive\r\naccept: application/json\r\ncontent-type: application/json\r\n"
    b"user-agent: OpenAI/Python 1.0\r\nauthorization: Bearer sk-0123456789abcdef0123456789abcdef\r\n"
    b"content-length: %d\r\n\r\n%s" % (len(BODY), BODY)
)


class _Transport(asyncio.Transport):
    """Collects nothing, closes never: the protocol's writes cost only the call."""

    def __init__(self) -> None:
        super().__init__()
        self.written = 0

    def write(self, data: Any) -> None:
        self.written += 1

    def get_extra_info(self, name: str, default: Any = None) -> Any:
        return {"sockname": ("127.0.0.1", 8000), "peername": ("127.0.0.1", 50000)}.get(name, default)

    def is_closing(self) -> bool:
        return False

    def pause_reading(self) -> None:
        pass

    def close(self) -> None:
        pass

    def resume_reading(self) -> None:
        pass


async def _app(scope: Any, receive: Any, send: Any) -> None:
    if scope["type"] != "http":
        return
    message = await receive()
    while message.get("more_body"):
        message = await receive()
    await send({"type": "http.response.start", "status": 200, "headers": [(b"content-length", b"2")]})
    await send({"type": "http.response.body", "body": b"{}"})


async def _run(protocol_class: type[HttpToolsProtocol], requests: int) -> float:
    """Seconds per request through ``protocol_class`` (one keep-alive connection)."""
    config = Config(_app, loop="none", http="httptools", log_level="warning", lifespan="off")
    config.load()
    protocol = protocol_class(config=config, server_state=ServerState(), app_state={})
    transport = _Transport()
    protocol.connection_made(transport)
    started = time.perf_counter()
    for _ in range(requests):
        protocol.data_received(REQUEST)
        while protocol.tasks:  # let the app answer before the next request arrives
            await asyncio.sleep(0)
    elapsed = time.perf_counter() - started
    assert transport.written >= requests, "the app did not answer every request"
    protocol.connection_lost(None)
    return elapsed / requests


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--requests", type=int, default=20000)
    parser.add_argument("--rounds", type=int, default=7)
    options = parser.parse_args()
    gateway_class = gateway_http_protocol(LimitsConfig())
    plain: list[float] = []
    bounded: list[float] = []

    async def rounds() -> None:
        await _run(HttpToolsProtocol, 2000)  # warm-up
        await _run(gateway_class, 2000)
        for _ in range(options.rounds):
            plain.append(await _run(HttpToolsProtocol, options.requests))
            bounded.append(await _run(gateway_class, options.requests))

    uvloop.run(rounds())
    p, b = statistics.median(plain), statistics.median(bounded)
    diffs = sorted(x - y for x, y in zip(bounded, plain, strict=True))
    print(f"uvicorn HttpToolsProtocol: {p * 1e6:.2f} us/request (median of {options.rounds} rounds)")
    print(f"gateway protocol:          {b * 1e6:.2f} us/request")
    print(
        f"difference (paired):       median {statistics.median(diffs) * 1e6:+.2f} us, "
        f"range {diffs[0] * 1e6:+.2f} .. {diffs[-1] * 1e6:+.2f} us"
    )


if __name__ == "__main__":
    main()
