"""What the commands that operate a Redis-backed fleet share: their options, client and errors.

``cascade policy`` (gateway.commands.policy) and ``cascade keys`` (gateway.commands.keys) take the same
``--redis`` URL and key prefix, open the client with ``traffic.redis_connect.connect_sync`` and
turn every failure into one red line and exit 1.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Annotated, Any, TypeVar

import typer

from cli_failure import fail
from gateway.redis.keys import PREFIX_ENV
from policies.errors import PolicyError
from traffic.redis_connect import RedisUnreachableError, connect_sync

RedisOption = Annotated[
    str,
    typer.Option("--redis", envvar="CASCADE_REDIS_URL", help="Redis URL, e.g. redis://127.0.0.1:6379/0"),
]
PrefixOption = Annotated[
    str,
    typer.Option("--prefix", envvar=PREFIX_ENV, hidden=True, help="Key prefix (default: cascade)."),
]

T = TypeVar("T")


class CliError(Exception):
    """A one-line error for the user."""


def connect(url: str) -> Any:
    """A synchronous client that answered a PING; CliError (the URL's password redacted) otherwise."""
    try:
        return connect_sync(url)
    except RedisUnreachableError as exc:
        raise CliError(str(exc)) from None


def run_command(action: Callable[[], T]) -> T:
    """Run an operation, turning CliError, PolicyError and Redis errors into one red line and exit 1."""
    import redis

    try:
        return action()
    except (CliError, PolicyError) as exc:
        fail(str(exc))
    except (redis.RedisError, OSError) as exc:
        fail(f"redis: {exc}")
    except (typer.Exit, typer.Abort):
        raise
    except Exception as exc:  # never a traceback for an operator's command: one line, exit 1
        fail(f"unexpected {type(exc).__name__}: {' '.join(str(exc).split())[:300]}")
