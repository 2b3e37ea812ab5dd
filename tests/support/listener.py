"""A loopback TCP listener that counts the connections made to it: proof that something (a schema
ref, a redirect) made the gateway reach out, or did not.

Nothing accepts while the code under test runs: the kernel completes every handshake into the
listen backlog, so ``connections()`` afterwards (a non-blocking drain of that backlog) counts every
connection made until then without waiting for anything."""

from __future__ import annotations

import socket


class Listener:
    """A loopback listening socket whose backlog holds every connection made to it."""

    def __init__(self) -> None:
        self.sock = socket.socket()
        self.sock.bind(("127.0.0.1", 0))
        self.sock.listen(64)
        self.sock.setblocking(False)
        self.port = self.sock.getsockname()[1]
        self._accepted = 0

    def connections(self) -> int:
        """Connections made so far (drains the backlog)."""
        while True:
            try:
                conn, _ = self.sock.accept()
            except BlockingIOError:
                return self._accepted
            self._accepted += 1
            conn.close()

    def close(self) -> None:
        self.sock.close()
