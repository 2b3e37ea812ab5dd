"""``cascade evaluate``: held-out evaluation of the envelope against baselines (docs/evaluate.md).

Heavy imports (numpy, pandas, optuna, scikit-learn, matplotlib) happen inside the command so
``cascade --help`` stays fast.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer

from calibration.commands.cli_errors import run_or_exit
from calibration.commands.cli_options import (
    EquivalenceOption,
    PricesOption,
    PromptsOption,
    RunsArgument,
    SamplesOption,
    ScoreColumnOption,
    ScorerOption,
    ScoreTokensOption,
    SeedOption,
    TopKOption,
    WhereOption,
)

if TYPE_CHECKING:
    from rich.console import Console

    from calibration.evaluation.protocol import EvaluationResult, EvaluationSettings
    from calibration.runs import RunsMatrix
    from policies.commit import CommitRule

ALL_METHODS = (
    "envelope",
    "envelope_hull",
    "single",
    "fixed_chain",
    "subsequence_nsga2",
    "subsequence_random",
    "router",
)
# Methods run only when asked for with --methods (the default set is what it was before them).
OPT_IN_METHODS = ("hybrid",)


def register(app: typer.Typer) -> None:
    """Add ``evaluate`` to the root app."""
    app.command("evaluate", no_args_is_help=True)(evaluate)


def split_list(items: list[str] | None) -> list[str]:
    """Repeated and/or comma-separated option values -> one flat list, blanks dropped."""
    return [part.strip() for item in items or [] for part in item.split(",") if part.strip()]


@dataclass(frozen=True)
class EvaluateOptions:
    """The command's arguments (see ``evaluate``)."""

    runs: Path
    report: Path
    prices: Path | None = None
    score_column: str | None = None
    scorer: str | None = None
    top_k: int | None = None
    equivalence: str | None = None
    samples: int | None = None
    score_tokens: str = "all"  # ScorerSpec.tokens
    commit: str | None = (
        None  # a prefix commit rule: "32" or "line" (calibration.policy.commit_choice.parse_grid)
    )
    where: list[str] = field(default_factory=list)
    splits: int = 50
    test_fraction: float = 0.5
    seed: int = 0
    trials: int = 200
    methods: list[str] = field(default_factory=lambda: list(ALL_METHODS))
    feature_columns: list[str] = field(default_factory=list)
    prompts: list[Path] = field(default_factory=list)
    features: str | None = None
    router_components: int | None = None
    command: str | None = None


# The options only this command has (the shared ones: calibration.commands.cli_options).
_ReportOption = Annotated[
    Path, typer.Option("--report", help="Directory for summary.json, curves.npz, PNG plots, report.html.")
]
_SplitsOption = Annotated[int, typer.Option("--splits", min=1, help="Random calibration/test splits.")]
_TestFractionOption = Annotated[
    float, typer.Option("--test-fraction", min=0.0, max=0.95, help="Share of queries held out per split.")
]
_TrialsOption = Annotated[
    int, typer.Option("--trials", min=1, help="Search trials per split for NSGA-II / random search.")
]
_MethodsOption = Annotated[
    list[str] | None,
    typer.Option(
        "--methods",
        help=f"Methods (repeat or comma-separate): {', '.join((*ALL_METHODS, *OPT_IN_METHODS))}.",
    ),
]
_FeatureColumnsOption = Annotated[
    list[str] | None,
    typer.Option("--feature-columns", help="Numeric per-query columns for the router (repeat or comma)."),
]
_FeaturesOption = Annotated[
    str | None,
    typer.Option(
        "--features", help="Feature set computed from --prompts: cheap-v1 or minilm-v1 (docs/routing.md)."
    ),
]
_ComponentsOption = Annotated[
    int | None,
    typer.Option("--router-components", min=1, help="Principal components the router keeps (per split)."),
]
_CommitOption = Annotated[
    str | None,
    typer.Option(
        "--commit",
        help="Evaluate under a prefix commit rule: K tokens or 'line' (docs/streaming.md); --prices.",
    ),
]


def evaluate(
    runs: RunsArgument,
    report: _ReportOption,
    prices: PricesOption = None,
    score_column: ScoreColumnOption = None,
    scorer: ScorerOption = None,
    top_k: TopKOption = None,
    equivalence: EquivalenceOption = None,
    samples: SamplesOption = None,
    score_tokens: ScoreTokensOption = "all",
    where: WhereOption = None,
    splits: _SplitsOption = 50,
    test_fraction: _TestFractionOption = 0.5,
    seed: SeedOption = 0,
    trials: _TrialsOption = 200,
    methods: _MethodsOption = None,
    feature_columns: _FeatureColumnsOption = None,
    prompts: PromptsOption = None,
    features: _FeaturesOption = None,
    router_components: _ComponentsOption = None,
    commit: _CommitOption = None,
) -> None:
    """Choose routes on calibration halves, score them on held-out halves, compare with baselines."""
    import shlex
    import sys

    from rich.console import Console

    console = Console()
    errors = Console(stderr=True)
    options = EvaluateOptions(
        runs=runs,
        report=report,
        prices=prices,
        score_column=score_column,
        scorer=scorer,
        top_k=top_k,
        equivalence=equivalence,
        samples=samples,
        score_tokens=score_tokens,
        where=list(where or []),
        splits=splits,
        test_fraction=test_fraction,
        seed=seed,
        trials=trials,
        methods=split_list(methods) or list(ALL_METHODS),
        feature_columns=split_list(feature_columns),
        prompts=list(prompts or []),
        features=features,
        router_components=router_components,
        commit=commit,
        command="cascade " + shlex.join(sys.argv[1:]) if sys.argv[1:2] == ["evaluate"] else None,
    )
    run_or_exit(lambda: run_evaluate(options, console, errors))


def run_evaluate(options: EvaluateOptions, console: Console, errors: Console) -> dict:
    """Load, evaluate, write the report directory, print the summary; returns summary.json's document.

    Runs of several request kinds (the ``kind`` column) are evaluated kind by kind, each into
    ``REPORT/KIND`` with its own summary (the kinds' route tables are calibrated apart, so each
    is held out apart); the document returned is then ``{"kinds": {KIND: summary}}``.
    """
    from dataclasses import replace

    from calibration.evaluation.protocol import METHOD_LABELS, EvaluationSettings

    unknown = [m for m in options.methods if m not in METHOD_LABELS]
    if unknown:
        raise ValueError(f"unknown method {unknown[0]!r} in --methods; known: {', '.join(METHOD_LABELS)}")
    if options.score_column and (
        options.scorer or options.top_k is not None or options.score_tokens != "all"
    ):
        raise ValueError("give --score-column or --scorer/--top-k/--score-tokens, not both")
    matrices = _load_matrices(options, errors)
    settings = EvaluationSettings(
        splits=options.splits,
        test_fraction=options.test_fraction,
        seed=options.seed,
        trials=options.trials,
        methods=tuple(dict.fromkeys(options.methods)),
        router_components=options.router_components,
    )
    summaries = {}
    for kind, matrix in matrices.items():
        kind_options = options if len(matrices) == 1 else replace(options, report=options.report / kind)
        if len(matrices) > 1:
            console.rule(f"kind {kind}: {matrix.n_queries:,} queries")
        result = _evaluate_with_progress(matrix, settings, errors)
        with errors.status("writing report…"):
            summaries[kind] = write_outputs(result, kind_options)
        print_summary(console, summaries[kind], kind_options.report, already_shown=matrix.notes)
    if len(matrices) == 1:
        return next(iter(summaries.values()))
    return {"kinds": summaries}


def _load_matrices(options: EvaluateOptions, errors: Console) -> dict[str, RunsMatrix]:
    """The runs table as one matrix per request kind (a spinner while it loads), notes as warnings;
    with ``--prompts``/``--features`` each matrix carries its queries' router features."""
    from dataclasses import replace

    from calibration.blackbox_scores import BlackboxOptions
    from calibration.commands.calibrate_cli import parse_where
    from calibration.policy.kinds import load_runs_by_kind

    with errors.status("loading runs…"):
        matrices = load_runs_by_kind(
            options.runs,
            prices=options.prices,
            score_column=options.score_column,
            scorer=options.scorer,
            top_k=options.top_k,
            where=parse_where(options.where),
            feature_columns=options.feature_columns or None,
            blackbox=BlackboxOptions(options.equivalence, options.samples),
            score_tokens=options.score_tokens,
            commit=_commit_rule(options.commit),
        )
    if bool(options.prompts) != bool(options.features):
        raise ValueError("--prompts and --features go together")
    if options.features and options.feature_columns:
        raise ValueError("give --feature-columns or --prompts/--features, not both")
    if options.features:
        from calibration.routing.prompt_features import features_for_queries, read_prompt_requests

        requests = read_prompt_requests(options.prompts)
        with errors.status(f"computing {options.features} features…"):
            matrices = {
                kind: replace(
                    matrix,
                    features=features_for_queries(
                        [str(q) for q in matrix.query_ids], requests, options.features
                    ).features,
                )
                for kind, matrix in matrices.items()
            }
    for kind, matrix in matrices.items():
        for note in matrix.notes:
            prefix = f"kind {kind}: " if len(matrices) > 1 else ""
            errors.print(f"[yellow]warning:[/yellow] {prefix}{note}", highlight=False)
    return matrices


def _evaluate_with_progress(
    matrix: RunsMatrix, settings: EvaluationSettings, errors: Console
) -> EvaluationResult:
    """``run_evaluation`` with one progress bar per method that runs, on stderr."""
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

    from calibration.evaluation.protocol import (
        METHOD_LABELS,
        progress_totals,
        run_evaluation,
        runnable_methods,
    )

    to_run, _ = runnable_methods(matrix, settings.methods)  # skipped methods are noted in the summary
    columns = (TextColumn("{task.description:<38}"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn())
    with Progress(*columns, console=errors, transient=False) as progress:
        units = {"fixed_chain": "trials", "subsequence_nsga2": "trials", "subsequence_random": "trials"}
        tasks = {
            name: progress.add_task(
                f"{METHOD_LABELS[name]} ({units.get(name, 'splits')})", total=total, start=False
            )
            for name, total in progress_totals(settings, to_run).items()
        }
        started: set[str] = set()

        def advance(name: str, count: int) -> None:
            if name not in started:  # each bar's clock starts with its method, not with the run
                started.add(name)
                progress.start_task(tasks[name])
            progress.advance(tasks[name], count)

        return run_evaluation(matrix, settings, advance)


def write_outputs(result: EvaluationResult, options: EvaluateOptions) -> dict:
    """summary.json, curves.npz, heldout_comparison.png, escalation_benefit.png, report.html."""
    from calibration.commands.calibrate_cli import parse_where
    from calibration.evaluation.summary import write_summary
    from calibration.reporting.calibration_report import filters_suffix
    from calibration.reporting.evaluation_plots import benefit_figure, heldout_comparison_figure, save_png
    from calibration.reporting.evaluation_report import write_report_page

    directory = options.report
    summary = write_summary(result, directory, source=str(options.runs), command=options.command)
    comparison = directory / "heldout_comparison.png"
    benefit = directory / "escalation_benefit.png"
    filters = filters_suffix(parse_where(options.where))
    save_png(heldout_comparison_figure(result, filters), str(comparison))
    save_png(benefit_figure(result), str(benefit))
    write_report_page(
        directory / "report.html", result, summary, comparison.read_bytes(), benefit.read_bytes()
    )
    return summary


def print_summary(
    console: Console, summary: dict, directory: Path, already_shown: tuple[str, ...] = ()
) -> None:
    """The terminal summary: methods, models, pair diagnostics, notes not already shown as load
    warnings (``already_shown``), where the files are."""
    from calibration.reporting.evaluation_report import methods_table, models_table, pairs_table

    console.print(models_table(summary))
    console.print(pairs_table(summary))
    console.print(methods_table(summary))
    for note in summary["notes"]:
        if note in already_shown:
            continue
        console.print(f"[dim]note: {note}[/dim]", highlight=False)
    console.print(
        f"report: {directory / 'report.html'} · summary: {directory / 'summary.json'} · "
        f"curves: {directory / 'curves.npz'} · plots: heldout_comparison.png, escalation_benefit.png",
        highlight=False,
        soft_wrap=True,
    )


def _commit_rule(text: str | None) -> CommitRule | None:
    """``--commit K`` or ``--commit line`` as a prefix rule (None: whole answers)."""
    if text is None:
        return None
    from calibration.policy.commit_choice import parse_grid

    rules = parse_grid(text)
    if len(rules) != 1:
        raise ValueError(f"--commit takes one rule (K or line), got {text!r}")
    return rules[0]
