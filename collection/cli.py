"""Commands of this module, mounted on the root ``cascade`` app: ``cascade collect``."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from cli_failure import fail


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
) -> None:
    """Send each question to each model (logprobs on), grade the answers, append the runs table.

    Resumable: (query_id, model) pairs already in the output are skipped.
    """
    import asyncio

    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeRemainingColumn

    from collection.collector import CollectOptions
    from collection.collector import collect as run_collect
    from collection.prompts import PromptSetError, load_prompts
    from collection.runs_writer import RunsFileError, RunsWriter, done_pairs
    from collection.targets import TargetError, targets_from_config, targets_from_pool

    names = _split(models)
    try:
        questions = load_prompts(prompts, limit)
        targets = targets_from_config(config, names) if config else targets_from_pool(names)
        done = done_pairs(output)
    except (PromptSetError, TargetError, RunsFileError) as exc:
        fail(str(exc))
    options = CollectOptions(
        top_logprobs=top_logprobs, max_tokens=max_tokens, concurrency=concurrency, keep_prompt=keep_prompt
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
