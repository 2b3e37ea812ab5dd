"""Commands of this package, mounted on the root ``cascade`` app."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from cascade_cli.failure import fail
from gateway.policy_cli import register as register_policy

# `cascade serve` exits 2 on a config it cannot start with (README, "Serve").
_CONFIG_ERROR = 2


def register(app: typer.Typer) -> None:
    """Add this package's commands to the root app."""
    app.command("serve")(serve)
    register_policy(app)  # `cascade policy push|show`, `cascade keys add|list|revoke`


def serve(
    config: Annotated[
        Path, typer.Option("--config", "-c", help="gateway YAML config (docs/contracts.md#config)")
    ],
    host: Annotated[str, typer.Option("--host", help="interface to listen on")] = "127.0.0.1",
    port: Annotated[int, typer.Option("--port", "-p", min=1, max=65535, help="TCP port to listen on")] = 8000,
) -> None:
    """Serve the OpenAI-compatible cascade gateway (one process, uvloop + httptools)."""
    from gateway.config import ConfigError, Settings

    try:
        settings = Settings.from_yaml(config)
    except ConfigError as exc:
        fail(str(exc), code=_CONFIG_ERROR)
    if not settings.policy_is_redis and not Path(settings.policy).is_file():
        fail(
            f"{config}: policy file {settings.policy} does not exist (write one with `cascade calibrate`)",
            code=_CONFIG_ERROR,
        )

    import uvicorn

    from gateway.app import create_app

    typer.echo(
        f"cascade gateway on http://{host}:{port}/v1 (config {config}, policy {settings.policy})", err=True
    )
    uvicorn.run(
        create_app(settings),
        host=host,
        port=port,
        loop="uvloop",
        http="httptools",
        workers=1,
        lifespan="on",
        access_log=False,
        log_level="warning",
        timeout_graceful_shutdown=5,
        server_header=False,
    )
