"""``cascade calibrate``: runs table + tiers file -> policy file (+ optional report).

Heavy imports (numpy, pandas, pyarrow, matplotlib) happen inside the command so ``cascade --help``
stays fast.
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer

from calibration.commands.calibrate_options import CalibrateOptions
from calibration.commands.calibrate_output import (
    print_commit_study,
    print_kind,
    print_timing,
    write_reports,
)
from calibration.commands.cli_errors import run_or_exit
from calibration.commands.cli_options import (
    EquivalenceOption,
    HeldoutOption,
    HeldoutSplitsOption,
    PricesOption,
    PromptsOption,
    RandomizeOption,
    RunsArgument,
    SamplesOption,
    ScoreColumnOption,
    ScorerOption,
    ScoreTokensOption,
    TiersOption,
    TopKOption,
    WhereOption,
)

if TYPE_CHECKING:
    from collections.abc import Mapping

    from rich.console import Console

    from calibration.bounds import BoundSettings
    from calibration.heldout_expected import HeldoutSettings
    from calibration.policy.benefit_choice import BenefitSettings
    from calibration.policy.commit_choice import CommitStudy
    from calibration.policy.kinds import CalibratedKinds
    from calibration.routing.mechanisms import RoutingOptions
    from calibration.runs import RunsMatrix
    from calibration.tiers import TiersSpec

_ReportOption = Annotated[
    Path | None, typer.Option("--report", help="Directory for PNG plots and report.html.")
]
_MechanismsOption = Annotated[
    str,
    typer.Option(
        "--mechanisms",
        help="Mechanisms a tier may serve, chosen held out: cascade, routed, hybrid (docs/routing.md).",
    ),
]
_FeaturesOption = Annotated[
    str, typer.Option("--features", help="Router feature set: cheap-v1 or minilm-v1.")
]
_ComponentsOption = Annotated[
    int, typer.Option("--router-components", min=1, help="Principal components the router keeps.")
]
_CommitGridOption = Annotated[
    str | None,
    typer.Option(
        "--commit-grid",
        help="Prefix rules to try per tier, e.g. 8,16,32,64,line (docs/streaming.md); needs --prices.",
    ),
]
_BoundsOption = Annotated[
    bool,
    typer.Option(
        "--bounds/--no-bounds",
        help="Certify each tier's one-sided bounds on queries its route was not chosen on "
        "(expected.bounds, docs/calibrate.md#bounds).",
    ),
]
_ConfidenceOption = Annotated[
    float,
    typer.Option(
        "--confidence", min=0.5, max=0.9999, help="Confidence of the tiers' bounds, all statements together."
    ),
]
_BenefitOption = Annotated[
    bool,
    typer.Option(
        "--benefit-scorer",
        help="Let each two-stage cascade tier take the escalation_benefit scorer, fitted on its pair, "
        "where it wins held out (docs/calibrate.md#the-benefit-scorer).",
    ),
]
_MinGainShareOption = Annotated[
    float,
    typer.Option(
        "--min-gain-share", min=0.0, max=1.0, help="Share of the buffered gain a prefix rule must keep."
    ),
]


def register(app: typer.Typer) -> None:
    """Add ``calibrate`` to the root app."""
    app.command("calibrate", no_args_is_help=True)(calibrate)


def parse_where(items: list[str] | None) -> dict[str, str]:
    """``["dataset=mmlu", ...]`` -> ``{"dataset": "mmlu"}``; ValueError on an item without '='."""
    where: dict[str, str] = {}
    for item in items or []:
        column, sep, value = item.partition("=")
        if not sep or not column.strip():
            raise ValueError(f"--where expects COLUMN=VALUE, got {item!r}")
        where[column.strip()] = value
    return where


def calibrate(
    runs: RunsArgument,
    tiers: TiersOption,
    output: Annotated[Path, typer.Option("-o", "--output", help="Policy file to write (JSON).")],
    prices: PricesOption = None,
    score_column: ScoreColumnOption = None,
    scorer: ScorerOption = None,
    top_k: TopKOption = None,
    equivalence: EquivalenceOption = None,
    samples: SamplesOption = None,
    score_tokens: ScoreTokensOption = "all",
    where: WhereOption = None,
    report: _ReportOption = None,
    randomize: RandomizeOption = False,
    heldout: HeldoutOption = True,
    heldout_splits: HeldoutSplitsOption = 50,
    bounds: _BoundsOption = True,
    confidence: _ConfidenceOption = 0.95,
    mechanisms: _MechanismsOption = "cascade",
    prompts: PromptsOption = None,
    features: _FeaturesOption = "cheap-v1",
    router_components: _ComponentsOption = 16,
    commit_grid: _CommitGridOption = None,
    min_gain_share: _MinGainShareOption = 0.8,
    benefit_scorer: _BenefitOption = False,
) -> None:
    """Compute the pairwise envelope of a model pool and write a policy with one route per tier.

    Runs rows of several request kinds (the ``kind`` column) get one route table each: the top
    level from the text rows, a section per other kind (docs/contracts.md#policy-file).
    """
    from rich.console import Console

    console = Console()
    errors = Console(stderr=True)
    options = CalibrateOptions(
        runs=runs,
        tiers=tiers,
        output=output,
        prices=prices,
        score_column=score_column,
        scorer=scorer,
        top_k=top_k,
        equivalence=equivalence,
        samples=samples,
        score_tokens=score_tokens,
        where=list(where or []),
        report=report,
        randomize=randomize,
        heldout_splits=heldout_splits if heldout else 0,
        confidence=confidence if bounds else None,
        mechanisms=tuple(m.strip() for m in mechanisms.split(",") if m.strip()),
        prompts=list(prompts or []),
        features=features,
        router_components=router_components,
        commit_grid=commit_grid,
        min_gain_share=min_gain_share,
        benefit_scorer=benefit_scorer,
    )
    run_or_exit(lambda: run_calibrate(options, console, errors))


def routing_options(
    options: CalibrateOptions, matrices: Mapping[str, RunsMatrix]
) -> tuple[dict[str, RunsMatrix], dict[str, RoutingOptions] | None]:
    """With routing mechanisms asked for: the matrices carrying their queries' router features
    (from ``--prompts``) and each kind's routing options; else the matrices as they are and None."""
    from dataclasses import replace

    from calibration.routing.mechanisms import MECHANISMS, RoutingOptions
    from calibration.routing.prompt_features import features_for_queries, read_prompt_requests

    unknown = [m for m in options.mechanisms if m not in MECHANISMS]
    if unknown or not options.mechanisms:
        raise ValueError(
            f"--mechanisms takes some of {', '.join(MECHANISMS)}, got {','.join(options.mechanisms)}"
        )
    if set(options.mechanisms) <= {"cascade"}:
        return dict(matrices), None
    if not options.prompts:
        raise ValueError(
            "--mechanisms routed/hybrid need --prompts (the runs' prompt set, for the router's features)"
        )
    if options.heldout_splits == 0:
        raise ValueError("--mechanisms routed/hybrid choose on held-out data: drop --no-heldout")
    requests = read_prompt_requests(options.prompts)
    with_features = {
        kind: replace(
            matrix,
            features=features_for_queries(
                [str(q) for q in matrix.query_ids], requests, options.features
            ).features,
        )
        for kind, matrix in matrices.items()
    }
    routing = RoutingOptions(tuple(options.mechanisms), options.features, options.router_components)
    return with_features, {kind: routing for kind in matrices}


def benefit_options(
    options: CalibrateOptions, matrices: Mapping[str, RunsMatrix], filters: dict[str, str], errors: Console
) -> tuple[dict[str, RunsMatrix], BenefitSettings | None]:
    """With ``--benefit-scorer``: the matrices carrying their answers' features (from the runs'
    logprobs) and the benefit scorer's settings; else the matrices as they are and None."""
    if not options.benefit_scorer:
        return dict(matrices), None
    from calibration.benefit_fit import with_answer_features
    from calibration.policy.benefit_choice import BenefitSettings

    settings = BenefitSettings(top_k=options.top_k or BenefitSettings.top_k)
    with errors.status("Reading the answers' features for the benefit scorer ..."):
        return with_answer_features(options.runs, matrices, settings.top_k, filters), settings


def bound_settings(options: CalibrateOptions) -> BoundSettings | None:
    """The tiers' bound settings (None with ``--no-bounds``): a union bound over every way of
    serving a tier the command chooses among on held-out data (``calibration.bounds``)."""
    from calibration.bounds import BoundSettings
    from calibration.policy.commit_choice import parse_grid

    if options.confidence is None:
        return None
    rules = 1 + (len(parse_grid(options.commit_grid)) if options.commit_grid is not None else 0)
    mechanisms = max(1, len(set(options.mechanisms) | {"cascade"})) + int(options.benefit_scorer)
    return BoundSettings(confidence=options.confidence, alternatives=rules * mechanisms)


def _check_score_options(options: CalibrateOptions) -> None:
    if options.benefit_scorer and options.heldout_splits == 0:
        raise ValueError("--benefit-scorer chooses on held-out data: drop --no-heldout")
    if options.score_column is not None and (
        options.scorer is not None or options.top_k is not None or options.score_tokens != "all"
    ):
        raise ValueError(
            "--score-column is a precomputed score; it cannot be combined with --scorer, --top-k or "
            "--score-tokens"
        )


def run_calibrate(options: CalibrateOptions, console: Console, errors: Console) -> None:
    """Load, compute, solve, write; print the summary to ``console`` and warnings to ``errors``."""
    from calibration.heldout_expected import HeldoutSettings
    from calibration.policy.commit_choice import apply_choice
    from calibration.policy.policy_writer import write_policy
    from calibration.tiers import load_tiers
    from policies.store import build_policy, policy_as_document

    runs, output, randomize = options.runs, options.output, options.randomize
    filters = parse_where(options.where)
    _check_score_options(options)
    spec = load_tiers(options.tiers)
    with errors.status(f"Loading {runs} ..."):
        started = time.perf_counter()
        matrices = _load_matrices(options, filters)
        loaded = time.perf_counter()
    size = ", ".join(f"{m.n_queries:,} {kind} queries" for kind, m in matrices.items())
    heldout = HeldoutSettings(splits=options.heldout_splits) if options.heldout_splits else None
    bounds = bound_settings(options)  # the same for every kind and commit rule
    with errors.status("Computing the router's features ..."):
        matrices, routing = routing_options(options, matrices)
    matrices, benefit = benefit_options(options, matrices, filters, errors)
    with errors.status(f"Computing the envelope of {size} ..."):
        calibrated = _calibrate(
            errors,
            matrices,
            spec,
            randomize=randomize,
            heldout=heldout,
            routing=routing,
            bounds=bounds,
            benefit=benefit,
        )
        computed = time.perf_counter()
    policy = calibrated.policy
    study = None
    if options.commit_grid is not None:
        with errors.status("Calibrating the commit rules held out ..."):
            study = _study_commits(options, spec, matrices, heldout, filters, bounds)
            policy = build_policy(apply_choice(policy_as_document(policy), study))
    write_policy(policy, output)

    for kind, matrix in matrices.items():
        print_kind(console, errors, kind, matrix, calibrated, spec, several=len(matrices) > 1)
    for note in calibrated.notes:
        errors.print(f"[yellow]note:[/yellow] {note}", highlight=False, soft_wrap=True)
    print_timing(console, runs, (loaded - started, computed - loaded), randomize, heldout)
    if study is not None:
        print_commit_study(console, options, study)
    console.print(
        f"[green]Wrote policy {policy.policy_id}[/green] to {output}", highlight=False, soft_wrap=True
    )
    if options.report is not None:
        write_reports(console, errors, options, matrices, calibrated, spec, filters)


def _load_matrices(options: CalibrateOptions, filters: dict[str, str]) -> dict[str, RunsMatrix]:
    """The runs file as one matrix per request kind (``calibration.policy.kinds``)."""
    from calibration.blackbox_scores import BlackboxOptions
    from calibration.policy.kinds import load_runs_by_kind

    return load_runs_by_kind(
        options.runs,
        prices=options.prices,
        score_column=options.score_column,
        scorer=options.scorer,
        top_k=options.top_k,
        where=filters,
        blackbox=BlackboxOptions(options.equivalence, options.samples),
        score_tokens=options.score_tokens,
    )


def _calibrate(
    errors: Console,
    matrices: Mapping[str, RunsMatrix],
    spec: TiersSpec,
    *,
    randomize: bool,
    heldout: HeldoutSettings | None,
    routing: Mapping[str, RoutingOptions] | None,
    bounds: BoundSettings | None = None,
    benefit: BenefitSettings | None = None,
) -> CalibratedKinds:
    """``calibrate_kinds``; on an unreachable tier, print the other tiers' warnings before the error."""
    from calibration.policy.kinds import calibrate_kinds
    from calibration.tiers import UnreachableTierError

    try:
        return calibrate_kinds(
            matrices,
            spec,
            randomize=randomize,
            heldout=heldout,
            routing=routing,
            bounds=bounds,
            benefit=benefit,
        )
    except UnreachableTierError as exc:  # the other tiers' warnings, then the error line
        for warning in exc.warnings:
            errors.print(f"[yellow]warning:[/yellow] {warning}", highlight=False, soft_wrap=True)
        raise


def _study_commits(
    options: CalibrateOptions,
    spec: TiersSpec,
    matrices: Mapping[str, RunsMatrix],
    heldout: HeldoutSettings | None,
    filters: dict[str, str],
    bounds: BoundSettings | None = None,
) -> CommitStudy:
    """Each tier's commit rule, chosen held out (``calibration.policy.commit_choice``) on a text-only
    table."""
    from calibration.policy.commit_choice import parse_grid, study_commit_rules
    from calibration.runs import load_runs
    from calibration.ttft import read_lengths
    from policies.commit import CommitRule

    if set(matrices) != {"text"}:
        raise ValueError("--commit-grid applies to text requests: give runs of the text kind only (--where)")
    if heldout is None:
        raise ValueError("--commit-grid chooses on held-out data: drop --no-heldout")
    if options.prices is None:
        raise ValueError(
            "--commit-grid needs --prices: a cancelled cheap stage is charged by its token prices"
        )
    if options.score_column is not None:
        raise ValueError("--commit-grid scores prefixes of the logprobs: give --scorer, not --score-column")
    rules = parse_grid(options.commit_grid or "")

    def load(rule: CommitRule | None) -> RunsMatrix:
        return load_runs(
            options.runs,
            prices=options.prices,
            scorer=options.scorer,
            top_k=options.top_k,
            where=filters,
            score_tokens=options.score_tokens,
            commit=rule,
        )

    return study_commit_rules(
        load,
        spec,
        heldout,
        rules,
        lambda matrix: read_lengths(options.runs, matrix.query_ids, matrix.models, filters),
        min_share=options.min_gain_share,
        bounds=bounds,
    )
