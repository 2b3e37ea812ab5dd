"""``cascade recalibrate``: calibrate on fresh traffic, compare with the served policy, push if not worse.

Exit codes: 0 the new policy passed (and was pushed with ``--push``), 3 it was refused (one line
says why), 1 an error (nothing pushed), 2 a usage error.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Annotated, TypedDict

import typer

from calibration.commands.calibrate_cli import parse_where
from calibration.commands.cli_errors import run_or_exit
from calibration.commands.cli_options import (
    HeldoutOption,
    HeldoutSplitsOption,
    PricesOption,
    RandomizeOption,
    SeedOption,
    TiersOption,
    TopKOption,
    WhereOption,
)
from cli_failure import fail

if TYPE_CHECKING:
    from rich.console import Console

    from calibration.recalibration.recalibrate import RecalibrateOptions
    from calibration.recalibration.rule import Tolerances

REFUSED_EXIT_CODE = 3


def register(app: typer.Typer) -> None:
    """Add ``recalibrate`` to the root app."""
    app.command("recalibrate", no_args_is_help=True)(recalibrate)


# The options only this command has (the shared ones: calibration.commands.cli_options).
_StoreOption = Annotated[
    str, typer.Option("--store", help="Traffic store: postgresql://... or file:///path.jsonl")
]
_SinceOption = Annotated[
    str | None, typer.Option("--since", help="Only traffic this recent: 7d, 12h, 30m, or an ISO date.")
]
_ModelsOption = Annotated[
    str | None, typer.Option("--models", help="The pool, comma-separated (default: every model seen).")
]
_CurrentOption = Annotated[
    Path | None,
    typer.Option("--current", help="The policy to compare with (default: the one served at --push)."),
]
_PushOption = Annotated[
    str | None,
    typer.Option("--push", help="Redis to push to if the new policy passes, e.g. redis://127.0.0.1:6379/0."),
]
_PrefixOption = Annotated[
    str, typer.Option("--prefix", envvar="CASCADE_REDIS_PREFIX", hidden=True, help="Redis key prefix.")
]
_HoldoutOption = Annotated[float, typer.Option("--holdout", help="Share of the queries held out.")]
_OutputOption = Annotated[
    Path | None, typer.Option("-o", "--output", help="Write the new policy here (pushed or not).")
]
_JsonOption = Annotated[Path | None, typer.Option("--json", help="Write the JSON report here.")]
_ScorerOption = Annotated[
    str | None, typer.Option("--scorer", help="Scorer of the new policy (default: the current's).")
]
_ResamplesOption = Annotated[int, typer.Option("--resamples", help="Bootstrap resamples.")]
_ConfidenceOption = Annotated[float, typer.Option("--confidence", help="Interval level.")]
_QualityToleranceOption = Annotated[
    float, typer.Option("--quality-tolerance", help="Quality loss ignored (absolute).")
]
_CostToleranceOption = Annotated[
    float, typer.Option("--cost-tolerance", help="Cost excess ignored (relative).")
]
_MinQueriesOption = Annotated[
    int, typer.Option("--min-queries", help="Fewest complete queries to recalibrate on (per request kind).")
]


_MechanismsOption = Annotated[
    str | None,
    typer.Option(
        "--mechanisms",
        help="Mechanisms a tier may serve, chosen held out: cascade, routed, hybrid (default: all "
        "three where the current policy has a router, else cascade; docs/routing.md).",
    ),
]
_FeaturesOption = Annotated[
    str | None,
    typer.Option("--features", help="Feature set of a new router (default: the current's, else cheap-v1)."),
]
_RouterComponentsOption = Annotated[
    int | None, typer.Option("--router-components", min=1, help="Principal components the router keeps.")
]


def recalibrate(
    store: _StoreOption,
    tiers: TiersOption,
    since: _SinceOption = None,
    where: WhereOption = None,
    models: _ModelsOption = None,
    current: _CurrentOption = None,
    push: _PushOption = None,
    prefix: _PrefixOption = "cascade",
    seed: SeedOption = 0,
    holdout: _HoldoutOption = 0.5,
    output: _OutputOption = None,
    report: _JsonOption = None,
    prices: PricesOption = None,
    scorer: _ScorerOption = None,
    top_k: TopKOption = None,
    randomize: RandomizeOption = False,
    resamples: _ResamplesOption = 2000,
    confidence: _ConfidenceOption = 0.95,
    quality_tolerance: _QualityToleranceOption = 0.01,
    cost_tolerance: _CostToleranceOption = 0.05,
    min_queries: _MinQueriesOption = 100,
    heldout: HeldoutOption = True,
    heldout_splits: HeldoutSplitsOption = 50,
    mechanisms: _MechanismsOption = None,
    features: _FeaturesOption = None,
    router_components: _RouterComponentsOption = None,
) -> None:
    """Calibrate on part of the traffic, compare with the current policy on the rest, push if not worse.

    Each request kind of the traffic (the rows' ``kind``) is calibrated and compared on its own
    queries, as cascade calibrate does it; a policy's router is refitted on the sampled features.
    Exit code 0: the new policy passed (pushed with --push); 3: refused (the reason on one line); 1: error.
    """
    from calibration.recalibration.recalibrate import RecalibrateOptions

    def options() -> RecalibrateOptions:  # called inside run_or_exit: a bad --where is one line too
        return RecalibrateOptions(
            **_parsed(where, models, mechanisms, heldout, heldout_splits, quality_tolerance, cost_tolerance),
            store=store,
            tiers=tiers,
            since=since,
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
            min_queries=min_queries,
            features=features,
            router_components=router_components,
        )

    run_or_exit(lambda: _run_or_fail(options(), output, report))


class _ParsedOptions(TypedDict):
    """The ``RecalibrateOptions`` fields ``_parsed`` fills (typed, so the unpacking is checked)."""

    where: dict[str, str]
    models: list[str] | None
    mechanisms: tuple[str, ...] | None
    tolerances: Tolerances
    heldout_splits: int


def _parsed(
    where: list[str] | None,
    models: str | None,
    mechanisms: str | None,
    heldout: bool,
    heldout_splits: int,
    quality_tolerance: float,
    cost_tolerance: float,
) -> _ParsedOptions:
    """The ``RecalibrateOptions`` fields parsed from the command line: filters, names, tolerances, splits."""
    from calibration.recalibration.rule import Tolerances

    return {
        "where": parse_where(where),
        "models": list(_names(models)) or None,
        "mechanisms": None if mechanisms is None else _names(mechanisms),
        "tolerances": Tolerances(quality=quality_tolerance, cost=cost_tolerance),
        "heldout_splits": heldout_splits if heldout else 0,
    }


def _names(listed: str | None) -> tuple[str, ...]:
    """The names of a comma-separated option, blanks dropped."""
    return tuple(name.strip() for name in (listed or "").split(",") if name.strip())


def _run_or_fail(options: RecalibrateOptions, output: Path | None, report: Path | None) -> None:
    """``run_recalibrate``, its known errors as one line (exit 1)."""
    from rich.console import Console

    try:
        run_recalibrate(options, output, report, Console(), Console(stderr=True))
    except _known_errors() as exc:  # their messages are already one line for the user
        fail(str(exc))


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
    from calibration.policy.policy_writer import write_policy
    from calibration.recalibration.recalibrate import recalibrate as run
    from calibration.recalibration.redis_io import keep_report, push_if_unchanged
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
        document = report_document(result, policy_file=output, pushed_version=version)
        if result.current.client is not None:  # the console's Policy page shows the last one
            keep_report(result.current.client, document, PolicyKeys(options.prefix))
        if report is not None:
            write_report(document, report)
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
