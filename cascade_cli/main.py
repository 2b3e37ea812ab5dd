"""Root of the ``cascade`` CLI.

Each package contributes its commands through a ``register(app)`` function in its ``cli``
module; heavy imports (pandas, FastAPI, ...) happen inside the commands, so ``cascade --help``
stays fast, works on the core install, and ``calibration`` and ``gateway`` never import each
other. A command whose optional extra is not installed says so (``cascade_cli.extras``).
"""

from __future__ import annotations

import signal
import threading

import typer

from calibration.commands.cli import register as register_calibration
from cascade_cli.extras import guard_commands
from collection.cli import register as register_collection
from gateway.commands.cli import register as register_gateway
from gateway.commands.models_check import register as register_models_check
from localpool.cli import models_app
from localpool.cli import register as register_localpool
from replay.cli import register as register_replay
from traffic.cli import register as register_traffic

app = typer.Typer(
    name="cascade",
    help="LLM cascade gateway: calibrate a policy from per-query runs, serve it, operate it.",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
)


def restore_default_interrupt() -> None:
    """Make Ctrl-C (SIGINT) stop the command even when it was started with SIGINT ignored.

    A non-interactive shell starts a command run with ``&`` with SIGINT ignored (``nohup``, CI
    wrappers and ``bash scripts/test.sh &`` do the same), and Python then leaves it ignored: the
    command, and every process it starts, would never stop on Ctrl-C or ``kill -INT``. Only an
    ignored SIGINT is restored, so a handler installed by an in-process caller stays in place.
    """
    if threading.current_thread() is not threading.main_thread():
        return  # signal handlers can only be set from the main thread
    if signal.getsignal(signal.SIGINT) is signal.SIG_IGN:
        signal.signal(signal.SIGINT, signal.default_int_handler)


@app.callback()
def main() -> None:
    """LLM cascade gateway: calibrate a policy from per-query runs, serve it, operate it."""
    restore_default_interrupt()


@app.command()
def version() -> None:
    """Print the installed version."""
    from importlib.metadata import version as installed_version

    typer.echo(installed_version("cascade-gateway"))


register_calibration(app)
register_collection(app)
register_replay(app)
register_gateway(app)
register_localpool(app)
# `cascade models check` reads a gateway config: the gateway's command on the local pool's group.
register_models_check(models_app)
register_traffic(app)
# Each package's commands import their extra's dependencies (FastAPI, pandas, ...) only when they
# run; a lean install then gets one line naming the missing extra instead of a traceback.
guard_commands(app)


if __name__ == "__main__":
    app()
