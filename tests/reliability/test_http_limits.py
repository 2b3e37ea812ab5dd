"""Slow bodies and huge request heads against a real `cascade serve`, over raw sockets.

No key is sent (the gateway requires one): these bounds hold before authentication, for anyone who
can open a connection. Each test waits for the server's answer (a blocking read; the socket
timeout only keeps a broken server from hanging the suite).
"""

from __future__ import annotations

import json
import socket
import threading
import time
from collections.abc import Callable

import pytest

from tests.support.gateway_process import GatewayProcess

KEYS = {"CASCADE_API_KEYS": "sk-test"}
# How long a test waits for an answer it expects (a server that holds the connection fails the test).
ANSWER_WAIT_S = 30.0
BIG_HEADER_BYTES = 40 * 1024 * 1024


def _limits(**changes: float | int) -> dict[str, float | int]:
    return {"max_body_bytes": 1_048_576, "request_timeout_s": 30, **changes}


def _connect(gateway: GatewayProcess) -> socket.socket:
    sock = socket.create_connection(("127.0.0.1", gateway.port), timeout=ANSWER_WAIT_S)
    return sock


def _read_until_closed(sock: socket.socket) -> bytes:
    """Everything the server sends until it closes the connection (a reset ends it too)."""
    answer = b""
    try:
        while chunk := sock.recv(65536):
            answer += chunk
    except ConnectionResetError:
        pass
    return answer


def _status(answer: bytes) -> int:
    return int(answer.split(b" ", 2)[1]) if answer.startswith(b"HTTP/1.1 ") else 0


def _error_code(answer: bytes) -> str:
    return str(json.loads(answer.split(b"\r\n\r\n", 1)[1])["error"]["code"])


def _head(*headers: bytes, content_length: int = 0) -> bytes:
    lines = [b"POST /v1/chat/completions HTTP/1.1", b"host: 127.0.0.1", *headers]
    lines.append(b"content-type: application/json")
    lines.append(b"content-length: %d" % content_length)
    return b"\r\n".join(lines) + b"\r\n\r\n"


def _in_thread(work: Callable[[], None]) -> threading.Thread:
    thread = threading.Thread(target=work, daemon=True)
    thread.start()
    return thread


def test_bodies_that_never_finish_get_408_and_a_closed_connection(start_replicas) -> None:
    (gateway,) = start_replicas(1, env=KEYS, limits=_limits(body_timeout_s=1.0))
    # Twenty connections declare 100,000 bytes and send one; they are all answered.
    held = [_connect(gateway) for _ in range(20)]
    for sock in held:
        sock.sendall(_head(content_length=100_000) + b"{")
    # One more keeps trickling a byte every 0.2 s: the bound is on the whole body, not per read.
    trickling = _connect(gateway)
    trickling.sendall(_head(content_length=100_000))
    stop = threading.Event()

    def trickle() -> None:
        while not stop.wait(0.2):
            try:
                trickling.sendall(b" ")
            except OSError:
                return

    sender = _in_thread(trickle)
    answers = [_read_until_closed(sock) for sock in [*held, trickling]]
    stop.set()
    sender.join()
    for sock in [*held, trickling]:
        sock.close()

    assert [_status(a) for a in answers] == [408] * 21
    assert {_error_code(a) for a in answers} == {"request_timeout"}
    assert b"request body was not received in time" in answers[0]
    # The gateway still serves, said why it closed the connections, and logged each request as 408.
    assert gateway.get("/healthz").status_code == 200
    assert "request body not complete within 1.0s" in gateway.log_text()
    logged = _wait_for_request_lines(gateway, 21)
    assert [line["status"] for line in logged] == [408] * 21


def _wait_for_request_lines(gateway: GatewayProcess, count: int) -> list[dict[str, object]]:
    """The gateway's ``request`` log lines, once there are ``count`` of them."""
    deadline = time.monotonic() + ANSWER_WAIT_S
    while True:
        lines = [json.loads(line) for line in gateway.log_text().splitlines() if line.startswith("{")]
        requests = [line for line in lines if line.get("event") == "request"]
        if len(requests) >= count or time.monotonic() > deadline:
            return requests
        time.sleep(0.05)


def test_a_body_that_arrives_in_time_is_read_whole(start_replicas, upstream) -> None:
    (gateway,) = start_replicas(1, env=KEYS, limits=_limits(body_timeout_s=5.0))
    body = json.dumps({"model": "small", "messages": [{"role": "user", "content": "hi"}]}).encode()
    with _connect(gateway) as sock:
        sock.sendall(_head(b"authorization: Bearer sk-test", b"connection: close", content_length=len(body)))
        sock.sendall(body[:10])  # the rest in a later read
        sock.sendall(body[10:])
        answer = _read_until_closed(sock)
    assert _status(answer) == 200, answer[:500]


def _send_huge_header(sock: socket.socket, sent: list[int]) -> None:
    sock.sendall(b"GET /healthz HTTP/1.1\r\nhost: 127.0.0.1\r\nx-big: ")
    chunk = b"a" * 65536
    try:
        while sent[0] < BIG_HEADER_BYTES:
            sock.sendall(chunk)
            sent[0] += len(chunk)
        sock.sendall(b"\r\n\r\n")
    except OSError:
        pass  # the server refused the head and closed the connection


def test_a_40_mb_header_is_refused_with_431_before_it_is_read_whole(start_replicas) -> None:
    (gateway,) = start_replicas(1, env=KEYS, limits=_limits())
    rss_before = gateway.rss_bytes()
    connections = [_connect(gateway) for _ in range(3)]
    sent = [[0] for _ in connections]
    pairs = zip(connections, sent, strict=True)
    senders = [_in_thread(lambda s=s, n=n: _send_huge_header(s, n)) for s, n in pairs]
    answers = [_read_until_closed(sock) for sock in connections]
    for sender in senders:
        sender.join(ANSWER_WAIT_S)
    rss_after = gateway.rss_bytes()
    for sock in connections:
        sock.close()

    assert [_status(a) for a in answers] == [431] * 3, [a[:200] for a in answers]
    assert {_error_code(a) for a in answers} == {"headers_too_large"}
    assert b"request headers exceed 65536 bytes" in answers[0]
    # Refused while the client was still sending: the 40 MB never all reached the server ...
    assert all(n[0] < BIG_HEADER_BYTES for n in sent), sent
    # ... and the process did not grow by what the clients sent (three 40 MB heads).
    assert rss_after - rss_before < 32 * 1024 * 1024, (rss_before, rss_after)
    assert gateway.get("/healthz").status_code == 200


@pytest.mark.parametrize(
    ("headers", "status"),
    [
        pytest.param([b"x-pad: " + b"a" * 6000], 401, id="a 6 KB header under the 8 KB cap reaches the app"),
        pytest.param([b"x-pad: " + b"a" * 12000], 431, id="a 12 KB header in one read is refused"),
        pytest.param([b"x-h%d: v" % i for i in range(40)], 431, id="40 header fields over the cap of 32"),
        pytest.param([b"x-h%d: v" % i for i in range(20)], 401, id="20 header fields under the cap"),
    ],
)
def test_request_heads_over_the_configured_caps_get_431(start_replicas, headers, status) -> None:
    (gateway,) = start_replicas(1, env=KEYS, limits=_limits(max_header_bytes=8192, max_headers=32))
    with _connect(gateway) as sock:
        sock.sendall(_head(*headers, b"connection: close", content_length=2) + b"{}")
        answer = _read_until_closed(sock)
    assert _status(answer) == status, answer[:300]
    if status == 431:
        assert _error_code(answer) == "headers_too_large"
    assert gateway.get("/healthz").status_code == 200
