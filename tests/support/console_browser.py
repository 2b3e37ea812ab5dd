"""The console in a real browser: Chromium from Debian (``/usr/bin/chromium``) driven by Playwright.

Playwright never downloads a browser here: ``launch_browser`` starts the system Chromium
(scripts/setup.sh installs it). ``ErrorWatch`` collects every console error and page error of a page;
the ``console_page`` fixture (tests/gateway/console/conftest.py) fails the test on any.
``screenshot(page, name)`` writes ``<name>.png`` under ``$CASCADE_CONSOLE_SCREENSHOTS`` when it is set
(``CASCADE_CONSOLE_SCREENSHOTS=docs/images`` refreshes the pictures of docs/operations.md).
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

CHROMIUM = "/usr/bin/chromium"
SCREENSHOTS_ENV = "CASCADE_CONSOLE_SCREENSHOTS"


def launch_browser(playwright: Any) -> Any:
    """The system Chromium, headless (no sandbox when running as root: Chromium refuses it then)."""
    if not Path(CHROMIUM).exists():
        raise RuntimeError(f"{CHROMIUM} is missing: scripts/setup.sh installs the Debian chromium package")
    args = ["--no-sandbox"] if os.geteuid() == 0 else []
    return playwright.chromium.launch(executable_path=CHROMIUM, args=args)


class ErrorWatch:
    """Every console error and uncaught page error of a page, as text."""

    def __init__(self, page: Any):
        self.errors: list[str] = []
        page.on("console", self._console)
        page.on("pageerror", lambda error: self.errors.append(f"page error: {error}"))

    def _console(self, message: Any) -> None:
        if message.type == "error":
            self.errors.append(f"console error: {message.text}")


def screenshot(page: Any, name: str) -> None:
    """Write a full-page screenshot ``<name>.png`` under ``$CASCADE_CONSOLE_SCREENSHOTS`` (if set)."""
    folder = os.environ.get(SCREENSHOTS_ENV)
    if folder:
        Path(folder).mkdir(parents=True, exist_ok=True)
        page.screenshot(path=str(Path(folder) / f"{name}.png"), full_page=True)
