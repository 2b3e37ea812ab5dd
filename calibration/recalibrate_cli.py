"""``cascade recalibrate``: calibrate on fresh traffic, compare with the served policy, push if not worse.

Exit codes: 0 the new policy passed (and was pushed with ``--push``), 3 it was refused (one line
says why), 1 an error (nothing pushed), 2 a usage error.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer

from calibration.cli_errors import run_or_exit
from cli_failure import fail

if TYPE_CHECKING:
    from rich.console import Console

    from calibration.recalibration.recalibrate import RecalibrateOptions

REFUSED_EXIT_CODE = 3


def register(app: typer.Typer) -> None:
    """Add ``recalibrate`` to the root app."""
    app.command("recalibrate", no_args_is_help=True)(recalibrate)


def recalibrate(
    store: Annotated[
        str, typer.Option("--store", help="Traffic store: postgresql://... or file:///path.jsonl")
    ],
    tiers: Annotated[Path, typer.Option("--tiers", help="TIERS.yaml: default_tier and tier objectives.")],
    since: Annotated[
        str | None, typer.Option("--since", help="Only traffic this recent: 7d, 12h, 30m, or an ISO date.")
    ] = None,
    where: Annotated[
        list[str] | None,
        typer.Option("--where", metavar="COLUMN=VALUE", help="Keep matching traffic rows (repeatable)."),
    ] = None,
    models: Annotated[
        str | None, typer.Option("--models", help="The pool, comma-separated (default: every model seen).")
    ] = None,
    current: Annotated[
        Path | None,
        typer.Option("--current", help="The policy to compare with (default: the one served at --push)."),
    ] = None,
    push: Annotated[
        str | None,
        typer.Option(
            "--push", help="Redis to push to if the new policy passes, e.g. redis://127.0.0.1:6379/0."
        ),
    ] = None,
    prefix: Annotated[
        str, typer.Option("--prefix", envvar="CASCADE_REDIS_PREFIX", hidden=True, help="Redis key prefix.")
    ] = "cascade",
    seed: Annotated[int, typer.Option("--seed", help="Seed of the query split and the bootstrap.")] = 0,
    holdout: Annotated[float, typer.Option("--holdout", help="Share of the queries held out.")] = 0.5,
    output: Annotated[
        Path | None, typer.Option("-o", "--output", help="Write the new policy here (pushed or not).")
    ] = None,
    report: Annotated[Path | None, typer.Option("--json", help="Write the JSON report here.")] = None,
    prices: Annotated[Path | None, typer.Option("--prices", help="Price sheet YAML (else cost_usd).")] = None,
    scorer: Annotated[
        str | None, typer.Option("--scorer", help="Scorer of the new policy (default: the current's).")
    ] = None,
    top_k: Annotated[int | None, typer.Option("--top-k", help="Top-K of the scorer.")] = None,
    randomize: Annotated[
        bool, typer.Option("--randomize", help="Tiers as concave-hull mixtures hitting the budget exactly.")
    ] = False,
    resamples: Annotated[int, typer.Option("--resamples", help="Bootstrap resamples.")] = 2000,
    confidence: Annotated[float, typer.Option("--confidence", help="Interval level.")] = 0.95,
    quality_tolerance: Annotated[
        float, typer.Option("--quality-tolerance", help="Quality loss ignored (absolute).")
    ] = 0.01,
    cost_tolerance: Annotated[
        float, typer.Option("--cost-tolerance", help="Cost excess ignored (relative).")
    ] = 0.05,
    min_queries: Annotated[
        int,
        typer.Option("--min-queries", help="Fewest complete queries to recalibrate on (per request kind)."),
    ] = 100,
    heldout: Annotated[
        bool,
        typer.Option(
            "--heldout/--no-heldout",
            help="Cross-fit each tier's held-out expectations over random halves of the calibration "
            "queries (expected.heldout), as cascade calibrate does.",
        ),
    ] = True,
    heldout_splits: Annotated[
        int, typer.Option("--heldout-splits", min=1, help="Splits for the held-out expectations.")
    ] = 50,
) -> None:
    """Calibrate on part of the traffic, compare with the current policy on the rest, push if not worse.

    Each request kind of the traffic (the rows' ``kind``) is calibrated and compared on its own
    queries, as cascade calibrate does it: the top level from text, a section per other kind.

    Exit code 0: the new policy passed (pushed with --push); 3: refused (the reason on one line); 1: error.
    """
    from rich.console import Console

    from calibration.calibrate_cli import parse_where
    from calibration.recalibration.recalibrate import RecalibrateOptions
    from calibration.recalibration.rule import Tolerances

    def body() -> None:
        options = RecalibrateOptions(
            store=store,
            tiers=tiers,
            since=since,
            where=parse_where(where),
            models=[m.strip() for m in (models or "").split(",") if m.strip()] or None,
            current=current,
            push=push,
            prefix=prefix,
            seed=seed,
            holdout=holdout,
            prices=prices,
            scorer=scorer,
            top_k=top_k,
            randomize=randomize,
            resamples=resamples,
            confidence=confidence,
            tolerances=Tolerances(quality=quality_tolerance, cost=cost_tolerance),
            min_queries=min_queries,
            heldout_splits=heldout_splits if heldout else 0,
        )
        try:
            run_recalibrate(options, output, report, Console(), Console(stderr=True))
        except _known_errors() as exc:  # their messages are already one line for the user
            fail(str(exc))

    run_or_exit(body)


def _known_errors() -> tuple[type[Exception], ...]:
    """The errors whose message is the one line to show as is."""
    from calibration.recalibration.outcomes import PolicyOutcomeError
    from calibration.recalibration.recalibrate import RecalibrationError
    from calibration.recalibration.redis_io import RedisPolicyError
    from traffic.export import ExportError
    from traffic.redis_connect import RedisUnreachableError
    from traffic.store import StoreError

    return (
        RecalibrationError,
        RedisPolicyError,
        RedisUnreachableError,
        PolicyOutcomeError,
        ExportError,
        StoreError,
    )


def run_recalibrate(
    options: RecalibrateOptions, output: Path | None, report: Path | None, console: Console, errors: Console
) -> None:
    """Recalibrate, print the table, write the policy, push if it passed, report; exit 3 if refused."""
    from calibration.policy_writer import write_policy
    from calibration.recalibration.recalibrate import recalibrate as run
    from calibration.recalibration.redis_io import push_if_unchanged
    from calibration.recalibration.report import comparison_table, report_document, routes_table, write_report
    from publishing import PolicyKeys
    from redaction import redact_url

    result = run(options, progress=lambda text: errors.status(text))
    try:
        for note in result.notes:
            errors.print(f"[yellow]note:[/yellow] {note}", highlight=False, soft_wrap=True)
        for kind in result.kinds:
            console.print(routes_table(result, kind))
            console.print(comparison_table(result, kind))
        if output is not None:
            write_policy(result.policy, output)
            console.print(
                f"Wrote policy {result.policy.policy_id} to {output}", highlight=False, soft_wrap=True
            )
        version = None
        if result.accepted and options.push is not None:
            with errors.status(f"Pushing {result.policy.policy_id} ..."):
                keys = PolicyKeys(options.prefix)
                version = push_if_unchanged(
                    result.current.client, result.policy, keys, result.current.served_text
                )
        if report is not None:
            write_report(report_document(result, policy_file=output, pushed_version=version), report)
            console.print(f"Report: {report}", highlight=False, soft_wrap=True)
    finally:
        if result.current.client is not None:
            result.current.client.close()
    against = "none" if result.current.policy is None else result.current.policy.policy_id
    if not result.accepted:
        typer.secho(f"refused: {result.refusal}", fg=typer.colors.RED, err=True)
        raise typer.Exit(REFUSED_EXIT_CODE)
    if version is not None:
        assert options.push is not None
        console.print(
            f"[green]Pushed {result.policy.policy_id}[/green] (compared with {against}) as version "
            f"{version} to {redact_url(options.push)}",
            highlight=False,
            soft_wrap=True,
        )
    else:
        console.print(
            f"[green]Passed[/green]: {result.policy.policy_id} is not worse than {against} "
            "(not pushed: no --push)",
            highlight=False,
            soft_wrap=True,
        )
