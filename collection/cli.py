"""Commands of this module, mounted on the root ``cascade`` app: ``cascade collect``."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer

from cli_failure import fail

if TYPE_CHECKING:
    from collection.scorer_calls import ScorerCallsOptions


def register(app: typer.Typer) -> None:
    """Add this module's commands to the root app."""
    app.command("collect")(collect)


def _split(values: list[str] | None) -> list[str] | None:
    names = [n.strip() for value in values or [] for n in value.split(",") if n.strip()]
    return names or None


def collect(
    prompts: Annotated[
        Path, typer.Argument(help="labelled prompt set (JSONL: query_id, prompt, answer, grader)")
    ],
    output: Annotated[Path, typer.Option("--output", "-o", help="runs table to write/append (.jsonl)")],
    models: Annotated[
        list[str] | None, typer.Option("--models", "-m", help="model names (repeat or comma-separate)")
    ] = None,
    config: Annotated[
        Path | None,
        typer.Option("--config", "-c", help="gateway.yaml whose models to call (default: the local pool)"),
    ] = None,
    top_logprobs: Annotated[
        int, typer.Option("--top-logprobs", "-k", min=1, max=20, help="alternatives per token")
    ] = 15,
    max_tokens: Annotated[
        int | None,
        typer.Option(
            min=1,
            help="completion tokens per answer (default: the model's request defaults, else 1)",
        ),
    ] = None,
    concurrency: Annotated[int, typer.Option(min=1, max=64, help="calls in flight at once")] = 2,
    limit: Annotated[int | None, typer.Option(min=1, help="only the first N questions")] = None,
    keep_prompt: Annotated[bool, typer.Option("--keep-prompt", help="also store the prompt text")] = False,
    verifier: Annotated[
        str | None,
        typer.Option(
            help="record the 'verifier' scorer's call: this model (of the config) judges each answer"
        ),
    ] = None,
    verifier_prompt: Annotated[
        str | None,
        typer.Option(help="the verifier's prompt, with {question} and {answer} (default: the built-in one)"),
    ] = None,
    verifier_top_logprobs: Annotated[
        int, typer.Option(min=2, max=20, help="alternatives of the verifier's first token")
    ] = 10,
    consistency: Annotated[
        int, typer.Option(min=0, max=20, help="record K extra samples per answer (scorer 'consistency')")
    ] = 0,
    consistency_temperature: Annotated[
        float, typer.Option(min=0.0, max=2.0, help="temperature of the consistency samples")
    ] = 0.7,
    self_report: Annotated[
        bool,
        typer.Option("--self-report", help="record the model's stated confidence (scorer 'self_report')"),
    ] = False,
    scorer_models: Annotated[
        list[str] | None,
        typer.Option(help="models whose answers get the scorer calls (default: every model collected)"),
    ] = None,
    answers_from: Annotated[
        Path | None,
        typer.Option(help="runs table (.jsonl/.jsonl.gz) whose recorded answers to reuse instead of asking"),
    ] = None,
    timeout: Annotated[
        float | None,
        typer.Option(min=1.0, help="seconds per call (default: the config's, else 120)"),
    ] = None,
) -> None:
    """Send each question to each model (logprobs on), grade the answers, append the runs table.

    With --verifier/--consistency/--self-report, each answer also gets the black-box scorers' calls,
    recorded in the row's ``scorer_calls`` (docs/contracts.md#runs-table). With --answers-from, the
    answers recorded there are scored instead of new ones (rows copied, scorer calls added).
    Resumable: (query_id, model) pairs already in the output are skipped.
    """
    import asyncio
    from dataclasses import replace

    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeRemainingColumn

    from collection.collector import CollectOptions
    from collection.collector import collect as run_collect
    from collection.prompts import PromptSetError, load_prompts
    from collection.runs_writer import RunsFileError, RunsWriter, done_pairs
    from collection.scorer_calls import recorded_rows
    from collection.targets import TargetError, targets_from_config, targets_from_pool

    names = _split(models)
    try:
        questions = load_prompts(prompts, limit)
        targets = targets_from_config(config, names) if config else targets_from_pool(names)
        if timeout is not None:
            targets = [replace(target, timeout_s=timeout) for target in targets]
        done = done_pairs(output)
        calls = _scorer_calls_options(
            config,
            verifier,
            verifier_prompt,
            verifier_top_logprobs,
            consistency,
            consistency_temperature,
            self_report,
            scorer_models,
        )
        recorded = recorded_rows(answers_from) if answers_from is not None else None
    except (PromptSetError, TargetError, RunsFileError) as exc:
        fail(str(exc))
    except (OSError, ValueError, KeyError) as exc:
        fail(f"{answers_from}: cannot read the recorded answers ({type(exc).__name__}: {exc})")
    options = CollectOptions(
        top_logprobs=top_logprobs,
        max_tokens=max_tokens,
        concurrency=concurrency,
        keep_prompt=keep_prompt,
        scorer_calls=calls,
        answers_from=recorded,
    )
    wanted = {(q.query_id, t.name) for q in questions for t in targets}
    typer.echo(
        f"{len(questions)} questions x {len(targets)} models ({', '.join(t.name for t in targets)}); "
        f"{len(wanted & done)} already in {output}",
        err=True,
    )
    progress = Progress(
        TextColumn("{task.description:<24}"),
        BarColumn(),
        MofNCompleteColumn(),
        TimeRemainingColumn(),
        transient=False,
    )
    with progress, RunsWriter(output) as writer:
        tasks = {
            t.name: progress.add_task(
                t.name, total=len(questions), completed=sum((q.query_id, t.name) in done for q in questions)
            )
            for t in targets
        }
        summary = asyncio.run(
            run_collect(
                questions,
                targets,
                writer,
                done,
                options,
                on_progress=lambda name: progress.advance(tasks[name]),
            )
        )
    typer.echo(
        f"wrote {summary.written} rows, skipped {summary.skipped} already done, {summary.failed} failed",
        err=True,
    )
    if summary.failed:
        for line in summary.errors:
            typer.echo(f"  {line}", err=True)
        fail(f"{summary.failed} calls failed; run the same command again to retry them")


def _scorer_calls_options(
    config: Path | None,
    verifier: str | None,
    verifier_prompt: str | None,
    verifier_top_logprobs: int,
    consistency: int,
    consistency_temperature: float,
    self_report: bool,
    scorer_models: list[str] | None,
) -> ScorerCallsOptions:
    """The black-box scorer calls asked on the command line (the verifier is a model of the config)."""
    from collection.scorer_calls import ScorerCallsOptions
    from collection.targets import TargetError, targets_from_config, targets_from_pool
    from policies.blackbox import VERIFIER_PROMPT

    if verifier_prompt is not None and not (
        "{question}" in verifier_prompt and "{answer}" in verifier_prompt
    ):
        raise TargetError("--verifier-prompt must contain {question} and {answer}")
    verifier_target = None
    if verifier is not None:
        (verifier_target,) = (
            targets_from_config(config, [verifier]) if config else targets_from_pool([verifier])
        )
    chosen = _split(scorer_models)
    return ScorerCallsOptions(
        verifier=verifier_target,
        verifier_prompt=verifier_prompt or VERIFIER_PROMPT,
        verifier_top_logprobs=verifier_top_logprobs,
        consistency=consistency,
        consistency_temperature=consistency_temperature,
        self_report=self_report,
        models=frozenset(chosen) if chosen else None,
    )
