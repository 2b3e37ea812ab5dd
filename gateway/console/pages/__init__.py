"""The console's pages, in the order of the navigation: each a ``ConsolePage`` (its title, its path under
``/console`` and the function building its routes from the ``ConsoleContext``). A new page is a module
of this folder and one entry of ``PAGES``; the mount puts the admin-key gate in front of it.
"""

from __future__ import annotations

from gateway.console.context import ConsolePage
from gateway.console.pages.keys import keys_routes
from gateway.console.pages.policy import policy_routes
from gateway.console.pages.requests import requests_routes
from gateway.console.pages.tiers import tiers_routes
from gateway.console.pages.upstreams import upstreams_routes

PAGES: list[ConsolePage] = [
    ConsolePage("Requests", "/requests", requests_routes),
    ConsolePage("Tiers", "/tiers", tiers_routes),
    ConsolePage("Keys", "/keys", keys_routes),
    ConsolePage("Policy and learning", "/policy", policy_routes),
    ConsolePage("Upstreams", "/upstreams", upstreams_routes),
]
