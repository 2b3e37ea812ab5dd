"""What every console page is given: the app's gateway, the request records and the renderer.

A page module (gateway.console.pages) is a function ``(ConsoleContext) -> APIRouter``; its routes are
paths under ``/console`` and are read-only (GET). The mount (gateway.console.mount) puts the admin-key
gate in front of every one of them: a page never checks access itself.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from fastapi import APIRouter

from gateway.assembly.runtime import Gateway
from gateway.console.views import Views
from gateway.records.store import RecordStore


@dataclass(frozen=True, slots=True)
class ConsoleContext:
    """The gateway the pages describe, its record store (None: the console records nothing, which
    the mount never lets happen: the console is served only when recording) and the renderer."""

    gateway: Gateway
    records: RecordStore
    views: Views


@dataclass(frozen=True, slots=True)
class ConsolePage:
    """A page of the navigation: its title, its path under ``/console``, and its routes."""

    title: str
    path: str
    routes: Callable[[ConsoleContext], APIRouter]
