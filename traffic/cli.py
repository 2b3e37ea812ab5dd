"""``cascade traffic export`` / ``purge``: the stored traffic as a runs table, and retention."""

from __future__ import annotations

import asyncio
from enum import StrEnum
from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer

from cascade_cli.failure import fail

if TYPE_CHECKING:
    from datetime import datetime

    from traffic.rows import TrafficRow
    from traffic.store import TrafficStore

traffic_app = typer.Typer(
    name="traffic", help="Sampled traffic: export it as a runs table, purge old rows.", no_args_is_help=True
)


class Incomplete(StrEnum):
    """What to do with a query that lacks a labelled row for some pool model."""

    drop = "drop"
    error = "error"


def register(app: typer.Typer) -> None:
    """Add the ``traffic`` command group to the root app."""
    app.add_typer(traffic_app)


def _parse_where(items: list[str] | None) -> dict[str, str]:
    where: dict[str, str] = {}
    for item in items or []:
        column, sep, value = item.partition("=")
        if not sep or not column.strip():
            fail(f"--where expects COLUMN=VALUE, got {item!r}")
        where[column.strip()] = value
    return where


@traffic_app.command("export")
def export(
    store: Annotated[str, typer.Option("--store", help="postgresql://... or file:///path/traffic.jsonl")],
    output: Annotated[
        Path, typer.Option("-o", "--output", help="runs table to write (.jsonl, .csv, .parquet)")
    ],
    since: Annotated[
        str | None, typer.Option("--since", help="only rows this recent: 7d, 12h, 30m, or an ISO date")
    ] = None,
    where: Annotated[
        list[str] | None,
        typer.Option("--where", metavar="COLUMN=VALUE", help="keep matching rows (repeatable)"),
    ] = None,
    models: Annotated[
        str | None, typer.Option("--models", help="the pool, comma-separated (default: every model seen)")
    ] = None,
    incomplete: Annotated[
        Incomplete, typer.Option("--incomplete", help="a query without a labelled row for every pool model")
    ] = Incomplete.drop,
) -> None:
    """Write the stored traffic as a runs table that ``cascade calibrate`` and ``evaluate`` read as is.

    Only complete queries are written: one labelled row per pool model. A query whose shadow call
    failed or whose label is missing is dropped (counted), or fails the export with --incomplete error.
    """
    from traffic.export import ExportError, select_complete, write_runs
    from traffic.store import StoreError, open_store, parse_since

    pool = [m.strip() for m in (models or "").split(",") if m.strip()] or None
    filters = _parse_where(where)
    try:
        start = parse_since(since) if since else None
        rows = asyncio.run(_export_rows(open_store(store), start, filters))
    except StoreError as exc:
        fail(str(exc))
    if not rows:
        fail(f"no traffic rows in {store}" + (f" since {since}" if since else "") + _describe(filters))
    selection = select_complete(rows, pool)
    lacking = sum(len(m) for m in selection.incomplete.values())
    if selection.incomplete:
        first, missing = next(iter(selection.incomplete.items()))
        message = (
            f"{len(selection.incomplete)} incomplete quer{'y' if len(selection.incomplete) == 1 else 'ies'} "
            f"({lacking} missing labelled rows; e.g. '{first}' lacks {', '.join(missing)})"
        )
        if incomplete is Incomplete.error:
            fail(message + "; use --incomplete drop to leave them out")
        typer.echo(f"note: dropped {message}", err=True)
    if selection.outside_pool:
        typer.echo(f"note: {selection.outside_pool} rows of models outside --models left out", err=True)
    if not selection.rows:
        fail(f"no complete query: every query lacks a labelled row for some of {', '.join(selection.models)}")
    try:
        columns = write_runs(selection.rows, output)
    except ExportError as exc:
        fail(str(exc))
    typer.echo(
        f"wrote {len(selection.rows)} rows ({selection.queries} queries x {len(selection.models)} models: "
        f"{', '.join(selection.models)}) to {output}; columns: {', '.join(columns)}",
        err=True,
    )


@traffic_app.command("purge")
def purge(
    store: Annotated[str, typer.Option("--store", help="postgresql://... or file:///path/traffic.jsonl")],
    older_than: Annotated[str, typer.Option("--older-than", help="retention: 30d, 12h, or an ISO date")],
) -> None:
    """Delete the rows recorded before the retention horizon."""
    from traffic.store import StoreError, open_store, parse_since

    try:
        horizon = parse_since(older_than)
        deleted = asyncio.run(_purge(open_store(store), horizon))
    except StoreError as exc:
        fail(str(exc))
    typer.echo(f"deleted {deleted} rows recorded before {horizon.isoformat()}", err=True)


async def _export_rows(
    store: TrafficStore, since: datetime | None, where: dict[str, str]
) -> list[TrafficRow]:
    try:
        return await store.export(since, where)
    finally:
        await store.close()


async def _purge(store: TrafficStore, horizon: datetime) -> int:
    try:
        return await store.purge(horizon)
    finally:
        await store.close()


def _describe(where: dict[str, str]) -> str:
    return "".join(f" --where {c}={v}" for c, v in where.items())
