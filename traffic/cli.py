"""``cascade traffic export`` / ``label`` / ``purge``: runs tables out of and into the traffic store."""

from __future__ import annotations

import asyncio
from enum import StrEnum
from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer

from cli_failure import fail

if TYPE_CHECKING:
    from datetime import datetime

    from traffic.rows import TrafficRow
    from traffic.store import TrafficStore

traffic_app = typer.Typer(
    name="traffic",
    help="Sampled traffic: export it as a runs table, label recorded answers, purge old rows.",
    no_args_is_help=True,
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
    """Write the stored traffic as a runs table that cascade calibrate and evaluate read as is.

    Only complete queries are written: one labelled row per pool model. A query whose shadow call
    failed or whose label is missing is dropped (counted), or fails the export with --incomplete error.
    """
    from traffic.export import ExportError, export_store, write_runs
    from traffic.store import StoreError

    pool = [m.strip() for m in (models or "").split(",") if m.strip()] or None
    filters = _parse_where(where)
    try:
        exported = export_store(store, since=since, where=filters, models=pool, incomplete=incomplete.value)
        for note in exported.notes:
            typer.echo(f"note: {note}", err=True)
        selection = exported.selection
        columns = write_runs(selection.rows, output)
    except (StoreError, ExportError) as exc:
        fail(str(exc))
    typer.echo(
        f"wrote {len(selection.rows)} rows ({selection.queries} queries x {len(selection.models)} models: "
        f"{', '.join(selection.models)}) to {output}; columns: {', '.join(columns)}",
        err=True,
    )


class TextJudge(StrEnum):
    """Judges that need no endpoint (the llm judge is configured in the gateway's learning config)."""

    exact = "exact"
    numeric = "numeric"
    choice = "choice"
    similarity = "similarity"


@traffic_app.command("label")
def label(
    runs: Annotated[Path, typer.Argument(help="JSONL runs table with a 'response' column (cascade collect)")],
    store: Annotated[str, typer.Option("--store", help="postgresql://... or file:///path/traffic.jsonl")],
    reference: Annotated[str, typer.Option("--reference", help="the model whose answer defines right")],
    judge: Annotated[TextJudge, typer.Option("--judge", help="how answers are compared")] = TextJudge.exact,
    threshold: Annotated[float, typer.Option("--threshold", help="similarity judge: cosine cut")] = 0.8,
    log_text: Annotated[bool, typer.Option("--log-text", help="also store prompts and answers")] = False,
) -> None:
    """Store a runs table's answers as traffic, labelled by a judge instead of its ground truth."""
    from traffic.backends import open_store
    from traffic.judges import make_judge, parse_judge_config
    from traffic.relabel import RelabelError, read_queries, relabel
    from traffic.store import StoreError

    config: dict[str, object] = {"kind": judge.value}
    if judge is TextJudge.similarity:
        config["threshold"] = threshold
    try:
        queries = read_queries(runs)
        models = {m for answers in queries.values() for m in answers}
        if reference not in models:
            fail(f"--reference {reference!r} is not a model of {runs} (it has {', '.join(sorted(models))})")
        labeller = make_judge(parse_judge_config(config))
        rows = list(asyncio.run(relabel(queries, labeller, reference, log_text=log_text)))
        written = asyncio.run(_write(open_store(store), rows))
    except (RelabelError, StoreError) as exc:
        fail(str(exc))
    missing = sum(r.correct is None for r in rows)
    agreement = {
        m: sum(r.correct or 0 for r in rows if r.model == m) / max(1, sum(r.model == m for r in rows))
        for m in sorted(models)
    }
    shown = ", ".join(f"{m} {a:.3f}" for m, a in agreement.items())
    typer.echo(
        f"stored {written} of {len(rows)} rows ({missing} without a label); "
        f"agreement with {reference}: {shown}",
        err=True,
    )


@traffic_app.command("purge")
def purge(
    store: Annotated[str, typer.Option("--store", help="postgresql://... or file:///path/traffic.jsonl")],
    older_than: Annotated[str, typer.Option("--older-than", help="retention: 30d, 12h, or an ISO date")],
) -> None:
    """Delete the rows recorded before the retention horizon."""
    from traffic.backends import open_store
    from traffic.store import StoreError, parse_since

    try:
        horizon = parse_since(older_than)
        deleted = asyncio.run(_purge(open_store(store), horizon))
    except StoreError as exc:
        fail(str(exc))
    typer.echo(f"deleted {deleted} rows recorded before {horizon.isoformat()}", err=True)


async def _write(store: TrafficStore, rows: list[TrafficRow]) -> int:
    try:
        written = 0
        for start in range(0, len(rows), 1000):  # batches of 1,000 rows: one statement each
            written += await store.write_rows(rows[start : start + 1000])
        return written
    finally:
        await store.close()


async def _purge(store: TrafficStore, horizon: datetime) -> int:
    try:
        return await store.purge(horizon)
    finally:
        await store.close()
