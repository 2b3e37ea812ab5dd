"""The console's pages, in the order of the navigation: each a ``ConsolePage`` (its title, its path under
``/console`` and the function building its routes from the ``ConsoleContext``). A new page is a module
of this folder and one entry of ``PAGES``; the mount puts the admin-key gate in front of it.
"""

from __future__ import annotations

from gateway.console.context import ConsolePage
from gateway.console.pages.requests import requests_routes

PAGES: list[ConsolePage] = [
    ConsolePage("Requests", "/requests", requests_routes),
]
