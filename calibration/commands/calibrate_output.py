"""What ``cascade calibrate`` prints and writes besides the policy: per kind the summary, held-out,
bounds, mechanism and scorer tables, the warnings, the timing, the commit study and the report."""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from collections.abc import Mapping
    from pathlib import Path

    from rich.console import Console

    from calibration.commands.calibrate_options import CalibrateOptions
    from calibration.heldout_expected import HeldoutSettings
    from calibration.policy.calibrate import Calibrated
    from calibration.policy.commit_choice import CommitStudy
    from calibration.policy.kinds import CalibratedKinds
    from calibration.runs import RunsMatrix
    from calibration.tiers import TierSolution, TiersSpec


EXTERNAL_SCORER_NOTE = (
    "scorer 'external' (precomputed column '{column}'): the gateway refuses to serve this policy, "
    "because it cannot compute that score from live logprobs. Use it for offline analysis, or "
    "calibrate from a 'logprobs' column with --scorer NAME to get a servable policy."
)


# The options only this command has (the shared ones: calibration.commands.cli_options).


def print_timing(
    console: Console,
    runs: Path,
    seconds: tuple[float, float],
    randomize: bool,
    heldout: HeldoutSettings | None,
) -> None:
    """How long loading and computing took, and what was computed."""
    held = f", held-out expectations over {heldout.splits} splits included" if heldout else ""
    console.print(
        f"Loaded {runs} in {seconds[0]:.2f} s; computed in {seconds[1]:.2f} s "
        f"({'randomized' if randomize else 'deterministic'} tiers{held})."
    )


def print_commit_study(console: Console, options: CalibrateOptions, study: CommitStudy) -> None:
    """The held-out commit-rule table, and the page it was written to with ``--report``."""
    from calibration.reporting.commit_report import commit_table, write_commit_report

    console.print(commit_table(study))
    if options.report is not None:
        page = write_commit_report(options.report, study)
        console.print(f"Commit rules: {page}", highlight=False, soft_wrap=True)


def print_kind(
    console: Console,
    errors: Console,
    kind: str,
    matrix: RunsMatrix,
    calibrated: CalibratedKinds,
    spec: TiersSpec,
    *,
    several: bool,
) -> None:
    """One kind's load warnings, summary, held-out table, tier warnings and scorer line."""
    from calibration.agreement import unrelated_model_warnings
    from calibration.reporting.terminal import heldout_table, print_summary

    one: Calibrated = calibrated.per_kind[kind]
    if several:
        where = "the top level" if kind == calibrated.top_kind else f"section kinds.{kind}"
        console.rule(f"kind {kind}: {matrix.n_queries:,} queries -> {where}")
    for note in (*matrix.notes, *unrelated_model_warnings(matrix.models, matrix.quality), *one.notes):
        errors.print(f"[yellow]warning:[/yellow] {note}", highlight=False, soft_wrap=True)
    print_summary(console, matrix, one.envelope, one.solutions, spec.default_tier)
    if one.heldout:
        console.print(heldout_table(one.heldout, spec.default_tier))
    if one.bounds:
        from calibration.reporting.terminal import bounds_table

        console.print(bounds_table(one.bounds, spec.default_tier))
    if one.mechanisms:
        from calibration.reporting.terminal import mechanisms_table

        console.print(mechanisms_table(one.mechanisms, spec.default_tier))
    if one.benefit:
        from calibration.reporting.terminal import benefit_table

        console.print(benefit_table(one.benefit, spec.default_tier))
    print_tier_warnings_and_scorer(console, errors, matrix, one.solutions)


def write_reports(
    console: Console,
    errors: Console,
    options: CalibrateOptions,
    matrices: Mapping[str, RunsMatrix],
    calibrated: CalibratedKinds,
    spec: TiersSpec,
    filters: dict[str, str],
) -> None:
    """The calibration report: in ``--report`` for one kind, in ``--report/KIND`` for several."""
    from calibration.reporting.calibration_report import write_calibration_report

    assert options.report is not None
    for kind, matrix in matrices.items():
        directory = options.report if len(matrices) == 1 else options.report / kind
        one = calibrated.per_kind[kind]
        with errors.status(f"Writing the report to {directory} ..."):
            page = write_calibration_report(
                directory,
                matrix,
                one.envelope,
                one.solutions,
                spec.default_tier,
                policy_id=calibrated.policy.policy_id,
                filters=filters,
                randomize=options.randomize,
                mechanisms=one.mechanisms,
                curves=one.curves,
                bounds=one.bounds,
            )
        console.print(f"Report: {page} (plots beside it)", highlight=False, soft_wrap=True)


def print_tier_warnings_and_scorer(
    console: Console, errors: Console, matrix: RunsMatrix, solutions: Mapping[str, TierSolution]
) -> None:
    """Each tier's warning, then which scorer the policy uses (a note if the gateway cannot serve it)."""
    for solution in solutions.values():
        if solution.warning:
            errors.print(f"[yellow]warning:[/yellow] {solution.warning}", highlight=False, soft_wrap=True)
    if matrix.scorer == "external":
        errors.print(
            "[yellow]note:[/yellow] " + EXTERNAL_SCORER_NOTE.format(column=matrix.score_column),
            highlight=False,
            soft_wrap=True,
        )
    else:
        tokens = "" if matrix.score_tokens == "all" else f", tokens={matrix.score_tokens}"
        console.print(
            f"Scorer: {matrix.scorer} (top_k={matrix.top_k}{tokens}), the same function the gateway applies."
        )
