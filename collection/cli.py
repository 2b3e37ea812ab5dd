"""Commands of this module, mounted on the root ``cascade`` app: ``cascade collect``."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any

import typer

from cli_failure import fail

if TYPE_CHECKING:
    from collection.collector import CollectOptions
    from collection.prompts import Prompt
    from collection.scorer_calls import ScorerCallsOptions
    from collection.targets import Target


def register(app: typer.Typer) -> None:
    """Add this module's commands to the root app."""
    app.command("collect")(collect)


def _split(values: list[str] | None) -> list[str] | None:
    names = [n.strip() for value in values or [] for n in value.split(",") if n.strip()]
    return names or None


# The command's options, one alias each (its signature stays one line per option).
_PromptsArgument = Annotated[
    Path, typer.Argument(help="labelled prompt set (JSONL: query_id, prompt, answer, grader)")
]
_OutputOption = Annotated[Path, typer.Option("--output", "-o", help="runs table to write/append (.jsonl)")]
_ModelsOption = Annotated[
    list[str] | None, typer.Option("--models", "-m", help="model names (repeat or comma-separate)")
]
_ConfigOption = Annotated[
    Path | None,
    typer.Option("--config", "-c", help="gateway.yaml whose models to call (default: the local pool)"),
]
_TopLogprobsOption = Annotated[
    int, typer.Option("--top-logprobs", "-k", min=1, max=20, help="alternatives per token")
]
_MaxTokensOption = Annotated[
    int | None,
    typer.Option(
        min=1,
        help="completion tokens per answer (default: the model's request defaults, else 1)",
    ),
]
_ConcurrencyOption = Annotated[int, typer.Option(min=1, max=64, help="calls in flight at once")]
_LimitOption = Annotated[int | None, typer.Option(min=1, help="only the first N questions")]
_KeepPromptOption = Annotated[bool, typer.Option("--keep-prompt", help="also store the prompt text")]
_VerifierOption = Annotated[
    str | None,
    typer.Option(help="record the 'verifier' scorer's call: this model (of the config) judges each answer"),
]
_VerifierPromptOption = Annotated[
    str | None,
    typer.Option(help="the verifier's prompt, with {question} and {answer} (default: the built-in one)"),
]
_VerifierTopLogprobsOption = Annotated[
    int, typer.Option(min=2, max=20, help="alternatives of the verifier's first token")
]
_ConsistencyOption = Annotated[
    int, typer.Option(min=0, max=20, help="record K extra samples per answer (scorer 'consistency')")
]
_ConsistencyTemperatureOption = Annotated[
    float, typer.Option(min=0.0, max=2.0, help="temperature of the consistency samples")
]
_SelfReportOption = Annotated[
    bool,
    typer.Option("--self-report", help="record the model's stated confidence (scorer 'self_report')"),
]
_ScorerModelsOption = Annotated[
    list[str] | None,
    typer.Option(help="models whose answers get the scorer calls (default: every model collected)"),
]
_AnswersFromOption = Annotated[
    Path | None,
    typer.Option(help="runs table (.jsonl/.jsonl.gz) whose recorded answers to reuse instead of asking"),
]
_TimeoutOption = Annotated[
    float | None,
    typer.Option(min=1.0, help="seconds per call (default: the config's, else 120)"),
]


def collect(
    prompts: _PromptsArgument,
    output: _OutputOption,
    models: _ModelsOption = None,
    config: _ConfigOption = None,
    top_logprobs: _TopLogprobsOption = 15,
    max_tokens: _MaxTokensOption = None,
    concurrency: _ConcurrencyOption = 2,
    limit: _LimitOption = None,
    keep_prompt: _KeepPromptOption = False,
    verifier: _VerifierOption = None,
    verifier_prompt: _VerifierPromptOption = None,
    verifier_top_logprobs: _VerifierTopLogprobsOption = 10,
    consistency: _ConsistencyOption = 0,
    consistency_temperature: _ConsistencyTemperatureOption = 0.7,
    self_report: _SelfReportOption = False,
    scorer_models: _ScorerModelsOption = None,
    answers_from: _AnswersFromOption = None,
    timeout: _TimeoutOption = None,
) -> None:
    """Send each question to each model (logprobs on), grade the answers, append the runs table.

    With --verifier/--consistency/--self-report, each answer also gets the black-box scorers' calls,
    recorded in the row's ``scorer_calls`` (docs/contracts.md#runs-table). With --answers-from, the
    answers recorded there are scored instead of new ones (rows copied, scorer calls added).
    Resumable: (query_id, model) pairs already in the output are skipped.
    """
    from collection.collector import CollectOptions
    from collection.prompts import PromptSetError, load_prompts
    from collection.runs_writer import RunsFileError, done_pairs
    from collection.targets import TargetError

    try:
        questions = load_prompts(prompts, limit)
        targets = _targets(config, models, timeout)
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
        recorded = _recorded_answers(answers_from)
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
    _collect_with_progress(questions, targets, output, done, options)


def _recorded_answers(answers_from: Path | None) -> dict[tuple[str, str], dict[str, Any]] | None:
    """The answers recorded in ``answers_from`` to score instead of asking (None: ask the models)."""
    from collection.scorer_calls import recorded_rows

    return recorded_rows(answers_from) if answers_from is not None else None


def _targets(config: Path | None, models: list[str] | None, timeout: float | None) -> list[Target]:
    """The models to ask: the config's (or the local pool's), with ``timeout`` per call when given."""
    from dataclasses import replace

    from collection.targets import targets_from_config, targets_from_pool

    targets = targets_from_config(config, _split(models)) if config else targets_from_pool(_split(models))
    if timeout is not None:
        targets = [replace(target, timeout_s=timeout) for target in targets]
    return targets


def _collect_with_progress(
    questions: list[Prompt],
    targets: list[Target],
    output: Path,
    done: set[tuple[str, str]],
    options: CollectOptions,
) -> None:
    """Run the collection into ``output`` with a progress bar per model and a summary (on stderr);
    exit 1 if calls failed."""
    import asyncio

    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeRemainingColumn

    from collection.collector import collect as run_collect
    from collection.runs_writer import RunsWriter

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
    from policies.blackbox import SELF_REPORT_PROMPT, VERIFIER_PROMPT
    from policies.scorers import CallSettings

    if verifier_prompt is not None and not (
        "{question}" in verifier_prompt and "{answer}" in verifier_prompt
    ):
        raise TargetError("--verifier-prompt must contain {question} and {answer}")
    scorers: dict[str, CallSettings] = {}
    own_models = {}
    if verifier is not None:
        (verifier_target,) = (
            targets_from_config(config, [verifier]) if config else targets_from_pool([verifier])
        )
        own_models[verifier_target.name] = verifier_target
        prompt = verifier_prompt or VERIFIER_PROMPT
        scorers["verifier"] = CallSettings(
            top_k=verifier_top_logprobs, model=verifier_target.name, prompt=prompt
        )
    if consistency > 0:
        scorers["consistency"] = CallSettings(samples=consistency, temperature=consistency_temperature)
    if self_report:
        scorers["self_report"] = CallSettings(prompt=SELF_REPORT_PROMPT)
    chosen = _split(scorer_models)
    return ScorerCallsOptions(
        scorers=scorers, targets=own_models, models=frozenset(chosen) if chosen else None
    )
