"""Which optional extra each ``cascade`` command needs, and one clear error when it is not installed.

The core install (``pip install cascade-gateway``) carries the contract package and the CLI itself;
each command group needs an extra declared in pyproject.toml (``gateway``, ``calibrate``,
``collect``, ``local``). Without this check a lean install would fail deep inside a command with a
bare ``ModuleNotFoundError``; with it, the command says which extra to install before it starts.

What an extra contains is read from the installed package's metadata (the ``extra == "..."``
requirements that pyproject.toml generates), so the list is never kept twice. Only the command's
body is guarded: ``cascade COMMAND --help`` works without the extra.
"""

from __future__ import annotations

import functools
import re
from collections.abc import Callable, Iterable
from importlib import metadata
from typing import Any

import typer

from cli_failure import fail

DISTRIBUTION = "cascade-gateway"

# Top-level command (or command group) -> the extras its body imports. Commands not listed run on
# the core install (`cascade version`).
COMMAND_EXTRAS: dict[str, tuple[str, ...]] = {
    "serve": ("gateway",),
    "policy": ("gateway",),
    "keys": ("gateway",),
    "calibrate": ("calibrate",),
    "evaluate": ("calibrate",),
    "recalibrate": ("calibrate", "traffic"),
    "collect": ("collect",),
    "replay": ("collect",),
    "models": ("local",),
    "demo": ("gateway", "local"),
    "traffic": ("collect", "traffic"),
}

# A subcommand needing other extras than its group (``"group command"`` -> its extras).
SUBCOMMAND_EXTRAS: dict[str, tuple[str, ...]] = {
    "models check": (
        "gateway",
    ),  # reads a gateway config and calls its models (gateway.upstream.models_check)
}

_NAME = re.compile(r"^\s*([A-Za-z0-9][A-Za-z0-9._-]*)")
_EXTRA_MARKER = re.compile(r"""extra\s*==\s*["']([^"']+)["']""")


def extra_requirements(extra: str, requirements: Iterable[str] | None = None) -> list[str]:
    """Distribution names that ``extra`` adds, from the installed metadata (or ``requirements``)."""
    if requirements is None:
        requirements = metadata.requires(DISTRIBUTION) or []
    names = []
    for requirement in requirements:
        spec, _, marker = requirement.partition(";")
        match = _NAME.match(spec)
        if match and extra in _EXTRA_MARKER.findall(marker):
            names.append(match.group(1))
    return names


def is_installed(distribution: str) -> bool:
    """Whether a distribution is installed in the running environment."""
    try:
        metadata.distribution(distribution)
    except metadata.PackageNotFoundError:
        return False
    return True


def missing_extras(command: str, installed: Callable[[str], bool] | None = None) -> list[str]:
    """The extras ``cascade COMMAND`` needs that are not (completely) installed, in order.

    ``installed(distribution)`` defaults to ``is_installed``. Running from a source tree that was
    never installed has no metadata to compare with: then nothing is reported missing and an absent
    module fails as usual.
    """
    installed = installed or is_installed
    try:
        requirements = metadata.requires(DISTRIBUTION) or []
    except metadata.PackageNotFoundError:
        return []
    return [
        extra
        for extra in SUBCOMMAND_EXTRAS.get(command) or COMMAND_EXTRAS.get(command, ())
        if not all(installed(name) for name in extra_requirements(extra, requirements))
    ]


def missing_extras_message(command: str, extras: list[str]) -> str:
    """One line naming the missing extras and the pip command that installs them."""
    names = " and ".join(extras)
    noun = "extras" if len(extras) > 1 else "extra"
    return f"cascade {command} needs the {names} {noun}: pip install '{DISTRIBUTION}[{','.join(extras)}]'"


def require_extras(command: str) -> None:
    """Exit with code 1 and the missing-extra message if ``cascade COMMAND`` cannot run here."""
    missing = missing_extras(command)
    if missing:
        fail(missing_extras_message(command, missing))


def _guard(command: str, info: Any) -> None:
    """Wrap a registered command's callback (a Typer ``CommandInfo``) once."""
    callback = info.callback
    if callback is None or hasattr(callback, "__cascade_extras_guard__"):
        return

    # functools.wraps keeps the signature and annotations Typer reads to build the options.
    @functools.wraps(callback)
    def run(*args: Any, **kwargs: Any) -> Any:
        require_extras(command)
        return callback(*args, **kwargs)

    run.__cascade_extras_guard__ = True  # type: ignore[attr-defined]
    info.callback = run


def _guard_group(command: str, app: typer.Typer) -> None:
    for info in app.registered_commands:
        subcommand = f"{command} {info.name}"
        _guard(subcommand if subcommand in SUBCOMMAND_EXTRAS else command, info)
    for group in app.registered_groups:
        if group.typer_instance is not None:
            _guard_group(command, group.typer_instance)


def guard_commands(app: typer.Typer) -> None:
    """Make every command of the root app check its extras (see ``COMMAND_EXTRAS``) before it runs."""
    for info in app.registered_commands:
        name = info.name or (info.callback.__name__.replace("_", "-") if info.callback else "")
        if name in COMMAND_EXTRAS:
            _guard(name, info)
    for group in app.registered_groups:
        if group.name in COMMAND_EXTRAS and group.typer_instance is not None:
            _guard_group(group.name, group.typer_instance)
