"""Whose address a request is (gateway/keys/client_address.py): the peer unless it is a trusted
proxy, then the right-most untrusted X-Forwarded-For entry; a client never picks it by the header."""

from __future__ import annotations

from typing import Any

import pytest

from gateway.keys.client_address import ClientAddress, ClientAddresses

PROXIES = ClientAddresses(["127.0.0.1", "10.0.0.0/8", "::1"])


def _scope(peer: tuple[str, int] | None, *forwarded: str) -> dict[str, Any]:
    return {"client": peer, "headers": [(b"x-forwarded-for", value.encode()) for value in forwarded]}


def test_without_trusted_proxies_the_peer_is_the_client_whatever_the_header_says() -> None:
    assert ClientAddresses().of(_scope(("127.0.0.1", 5000), "203.0.113.9")) == ("127.0.0.1", 5000)


def test_a_peer_that_is_not_a_trusted_proxy_is_the_client() -> None:
    assert PROXIES.of(_scope(("192.0.2.1", 5000), "203.0.113.9")) == ("192.0.2.1", 5000)


@pytest.mark.parametrize(
    ("forwarded", "client"),
    [
        (["203.0.113.9"], "203.0.113.9"),
        # A client's own X-Forwarded-For is left of what the proxies appended: never believed.
        (["198.51.100.7, 203.0.113.9"], "203.0.113.9"),
        (["198.51.100.7, 203.0.113.9, 10.1.2.3"], "203.0.113.9"),
        (["198.51.100.7", "203.0.113.9, 10.1.2.3"], "203.0.113.9"),  # several header lines: one list
        (["10.4.0.1, 10.1.2.3"], "10.4.0.1"),  # all trusted: the left-most
        (["not-an-address, 10.1.2.3"], "10.1.2.3"),  # the hop that reported a non-address
        (["2001:DB8::1"], "2001:db8::1"),
    ],
)
def test_from_a_trusted_proxy_the_right_most_untrusted_entry_is_the_client(
    forwarded: list[str], client: str
) -> None:
    assert PROXIES.of(_scope(("127.0.0.1", 5000), *forwarded)) == (client, None)


@pytest.mark.parametrize("forwarded", [[], ["garbage"], [""]])
def test_a_trusted_proxy_without_a_usable_header_is_the_client(forwarded: list[str]) -> None:
    assert PROXIES.of(_scope(("127.0.0.1", 5000), *forwarded)) == ("127.0.0.1", 5000)


def test_a_dual_stack_view_of_a_trusted_ipv4_proxy_is_trusted() -> None:
    assert PROXIES.of(_scope(("::ffff:10.0.0.5", 5000), "203.0.113.9")) == ("203.0.113.9", None)


def test_no_peer_is_no_address_and_the_port_is_shown_apart_from_the_host() -> None:
    assert PROXIES.of(_scope(None)) is None and PROXIES.of(None) is None
    assert str(ClientAddress("203.0.113.9", 443)) == "203.0.113.9:443"
    assert str(ClientAddress("2001:db8::1", 443)) == "[2001:db8::1]:443"
    assert str(ClientAddress("2001:db8::1")) == "2001:db8::1"
