"""gateway.api.request_cycle: the response head it writes is uvicorn's, byte for byte, and a bad
header is refused as uvicorn refuses it."""

from __future__ import annotations

import asyncio
import logging
from typing import Any

import pytest
from uvicorn.protocols.http.flow_control import FlowControl
from uvicorn.protocols.http.httptools_impl import RequestResponseCycle

from gateway.api.request_cycle import CONNECTION_LOST, ON_DISCONNECT, GatewayRequestCycle, adopt, disconnected


class _Transport:
    """What a cycle writes, and whether it closed the connection."""

    def __init__(self) -> None:
        self.written: list[bytes] = []
        self.closed = False

    def write(self, data: bytes) -> None:
        self.written.append(data)

    def close(self) -> None:
        self.closed = True

    def is_closing(self) -> bool:
        return self.closed

    def pause_reading(self) -> None:
        pass

    def resume_reading(self) -> None:
        pass


def _cycle(kind: type[RequestResponseCycle], method: str = "POST", keep_alive: bool = True) -> Any:
    transport = _Transport()
    logger = logging.getLogger("test")
    return kind(
        scope={"method": method, "type": "http"},  # type: ignore[typeddict-item]
        transport=transport,  # type: ignore[arg-type]
        flow=FlowControl(transport),  # type: ignore[arg-type]
        logger=logger,
        access_logger=logger,
        access_log=False,
        default_headers=[(b"date", b"Sun, 06 Dec 2026 10:00:00 GMT")],
        message_event=asyncio.Event(),
        expect_100_continue=False,
        keep_alive=keep_alive,
        on_response=lambda: None,
    )


def _exchange(
    kind: type[RequestResponseCycle],
    headers: list[tuple[bytes, bytes]],
    bodies: tuple[bytes, ...] = (b"ok",),
    **cycle: Any,
) -> Any:
    async def run() -> Any:
        it = _cycle(kind, **cycle)
        await it.send({"type": "http.response.start", "status": 200, "headers": headers})
        for body in bodies[:-1]:
            await it.send({"type": "http.response.body", "body": body, "more_body": True})
        await it.send({"type": "http.response.body", "body": bodies[-1], "more_body": False})
        return it

    return asyncio.run(run())


HEADS = {
    "content-length": [(b"content-type", b"application/json"), (b"content-length", b"2"), (b"x-a", b"1")],
    "chunked by default": [(b"Content-Type", b"text/event-stream"), (b"x-cascade-score", b"0.9")],
    "transfer-encoding": [(b"transfer-encoding", b"chunked"), (b"x-b", b"tab\there")],
    "connection close": [(b"content-length", b"2"), (b"Connection", b"keep-alive, Close")],
    "no headers": [],
}


@pytest.mark.parametrize("name", sorted(HEADS))
@pytest.mark.parametrize("keep_alive", [True, False])
@pytest.mark.parametrize("method", ["POST", "HEAD"])
def test_the_head_and_body_are_uvicorns(name: str, keep_alive: bool, method: str) -> None:
    bodies = (b"o", b"", b"k") if name != "content-length" else (b"o", b"k")
    ours = _exchange(GatewayRequestCycle, HEADS[name], bodies, keep_alive=keep_alive, method=method)
    theirs = _exchange(RequestResponseCycle, HEADS[name], bodies, keep_alive=keep_alive, method=method)
    assert ours.transport.written == theirs.transport.written
    assert (ours.keep_alive, ours.chunked_encoding, ours.response_complete) == (
        theirs.keep_alive,
        theirs.chunked_encoding,
        theirs.response_complete,
    )
    assert ours.transport.closed == theirs.transport.closed


@pytest.mark.parametrize(("bodies", "error"), [((b"okk",), "longer"), ((b"o",), "shorter")])
def test_a_body_off_its_content_length_is_refused_as_uvicorn_refuses_it(
    bodies: tuple[bytes], error: str
) -> None:
    with pytest.raises(RuntimeError, match=f"Response content {error} than Content-Length"):
        _exchange(GatewayRequestCycle, [(b"content-length", b"2")], bodies)


@pytest.mark.parametrize(
    ("headers", "error"),
    [
        ([(b"x-ok", b"1"), (b"bad name", b"1")], "Invalid HTTP header name."),
        ([(b"x-ok", b"1"), (b"x-bad", b"line\r\nbreak")], "Invalid HTTP header value."),
    ],
)
def test_a_bad_header_is_refused_as_uvicorn_refuses_it(
    headers: list[tuple[bytes, bytes]], error: str
) -> None:
    with pytest.raises(RuntimeError, match=error):
        _exchange(GatewayRequestCycle, headers)


def test_the_hook_is_called_when_the_connection_is_lost_before_the_response_completed() -> None:
    calls: list[str] = []
    cycle = _cycle(RequestResponseCycle)
    adopt(cycle)
    scope: dict[str, Any] = cycle.scope
    assert type(cycle) is GatewayRequestCycle and scope[ON_DISCONNECT] is None
    scope[ON_DISCONNECT] = lambda: calls.append("lost")
    disconnected(cycle)
    assert calls == ["lost"]
    cycle.response_complete = True
    disconnected(cycle)  # a completed response: the disconnect is the exchange's normal end
    assert calls == ["lost"]


def test_a_connection_lost_before_the_hook_was_stored_is_left_for_the_app_to_find() -> None:
    cycle = _cycle(RequestResponseCycle)
    adopt(cycle)
    disconnected(cycle)  # while the app still admits the request: no hook yet
    assert cycle.scope[ON_DISCONNECT] is CONNECTION_LOST
    disconnected(cycle)  # told twice: the mark stays, and nothing is called
    assert cycle.scope[ON_DISCONNECT] is CONNECTION_LOST
    plain = _cycle(RequestResponseCycle)
    disconnected(plain)  # a cycle that offers no hook (another server) is left as it was
    assert ON_DISCONNECT not in plain.scope


def _refused(kind: type[RequestResponseCycle], header: tuple[bytes, bytes]) -> bool:
    try:
        _exchange(kind, [header])
    except RuntimeError as error:
        return "Invalid HTTP header" in str(error)
    return False


@pytest.mark.parametrize("part", ["name", "value"])
def test_every_byte_is_refused_in_a_name_or_value_exactly_where_uvicorn_refuses_it(part: str) -> None:
    for byte in range(256):
        text = b"x" + bytes((byte,)) + b"y"
        header = (text, b"1") if part == "name" else (b"x-a", text)
        assert _refused(GatewayRequestCycle, header) == _refused(RequestResponseCycle, header), byte
