"""Who a request comes from: the one reading of a client's address (what a refused key is logged with
and what the wrong-key throttle counts).

The address is the connection's peer, unless the peer is one of the proxies the config names
(``trusted_proxies``, addresses or CIDR networks; none by default). Only then is ``X-Forwarded-For``
read, right to left: each entry a trusted proxy appended is skipped, and the first one that is not a
trusted proxy is the client (the right-most untrusted address). Entries further left were written by
the client itself or by proxies nobody vouches for, so they never decide: a client cannot pick the
address it is counted under by sending the header. If every entry is a trusted proxy, the left-most
is the client; an entry that is not an IP address ends the walk at the hop that reported it.

``cascade serve`` starts uvicorn without its own proxy-header handling (which would trust
``X-Forwarded-For`` from 127.0.0.1 by default and rewrite the peer before the gateway sees it), so
this module is the only place a forwarded address is believed. The header is read only when a key
is refused, never on the path of a request that carries a valid key.
"""

from __future__ import annotations

import ipaddress
from collections.abc import Iterable, Mapping
from typing import Any, NamedTuple

Network = ipaddress.IPv4Network | ipaddress.IPv6Network
Address = ipaddress.IPv4Address | ipaddress.IPv6Address

_FORWARDED_FOR = b"x-forwarded-for"


class ClientAddress(NamedTuple):
    """A client's host (an IP address, normalised, when it is one) and port (None when forwarded)."""

    host: str
    port: int | None = None

    def __str__(self) -> str:
        if self.port is None:
            return self.host
        return f"[{self.host}]:{self.port}" if ":" in self.host else f"{self.host}:{self.port}"


class ClientAddresses:
    """Reads the client's address of an ASGI connection, trusting ``X-Forwarded-For`` only from
    ``trusted_proxies`` (see the module docstring)."""

    __slots__ = ("_networks",)

    def __init__(self, trusted_proxies: Iterable[Network | str] = ()):
        """``trusted_proxies``: addresses or networks (``10.0.0.0/8``, ``127.0.0.1``, ``::1``)."""
        self._networks = tuple(ipaddress.ip_network(n) if isinstance(n, str) else n for n in trusted_proxies)

    def of(self, scope: Mapping[str, Any] | None) -> ClientAddress | None:
        """The client's address of ``scope`` (an ASGI connection scope), or None if it has no peer."""
        peer = scope.get("client") if scope is not None else None
        if not peer:
            return None
        host = str(peer[0])
        port = peer[1] if len(peer) > 1 else None
        if not self._networks:
            return ClientAddress(host, port)
        address = _ip(host)
        if address is None or not self._trusted(address):
            return ClientAddress(host, port)
        forwarded = self._forwarded(scope.get("headers", ()) if scope is not None else ())
        return forwarded if forwarded is not None else ClientAddress(host, port)

    def _forwarded(self, headers: Iterable[tuple[bytes, bytes]]) -> ClientAddress | None:
        """The right-most untrusted address of the ``X-Forwarded-For`` headers (None: no header)."""
        entries = [
            entry.strip()
            for name, value in headers
            if name.lower() == _FORWARDED_FOR
            for entry in value.decode("latin-1").split(",")
        ]
        reported: ClientAddress | None = None
        for entry in reversed(entries):
            address = _ip(entry)
            if address is None:
                return reported  # not an address: the hop that wrote it is as far as is known
            reported = ClientAddress(str(address))
            if not self._trusted(address):
                return reported
        return reported

    def _trusted(self, address: Address) -> bool:
        if isinstance(address, ipaddress.IPv6Address) and address.ipv4_mapped is not None:
            address = address.ipv4_mapped  # a dual-stack socket's view of an IPv4 peer
        return any(address in network for network in self._networks)


def _ip(text: str) -> Address | None:
    try:
        return ipaddress.ip_address(text)
    except ValueError:
        return None
