"""``cascade replay``: check a running gateway against what its policy promised."""

from __future__ import annotations

import asyncio
import json
import shlex
from pathlib import Path
from typing import Annotated, Any

import typer

from cli_failure import fail

EXIT_FLAGGED = 3
EXIT_INTERRUPTED = 130


def _split(values: list[str] | None) -> list[str]:
    return [n.strip() for value in values or [] for n in value.split(",") if n.strip()]


def register(app: typer.Typer) -> None:
    """Add ``cascade replay`` to the root app."""
    app.command("replay")(replay)


def results_path(report: Path) -> Path:
    """Where the per-request results of ``report`` live: ``<report stem>.requests.jsonl`` beside it."""
    return report.with_name(f"{report.stem}.requests.jsonl")


# The command's arguments, one alias each, so that ``replay`` reads as what it does.
PromptsArgument = Annotated[
    Path,
    typer.Argument(
        help="labelled prompt set, the `cascade collect` format (JSONL: query_id, prompt, answer, grader)"
    ),
]
GatewayOption = Annotated[
    str, typer.Option("--gateway", "-g", help="URL of the running gateway (http://host:port, /v1 optional)")
]
OutputOption = Annotated[
    Path,
    typer.Option(
        "--output",
        "-o",
        help="JSON report to write; per-request results go to <stem>.requests.jsonl beside it",
    ),
]
TiersOption = Annotated[
    list[str] | None,
    typer.Option(
        "--tier",
        "-t",
        help="tier to replay, sent as X-Cascade-Tier (repeat or comma-separate); default: every tier of "
        "the policy (or of the gateway's /v1/models without --policy) unless only budgets are given",
    ),
]
BudgetsOption = Annotated[
    list[float] | None,
    typer.Option("--max-cost-usd", help="budget to replay, sent as X-Cascade-Max-Cost-Usd (repeatable)"),
]
PolicyOption = Annotated[
    Path | None,
    typer.Option("--policy", "-p", help="the policy whose expectations to check (should be the served one)"),
]
HtmlOption = Annotated[Path | None, typer.Option("--html", help="also write a self-contained HTML report")]
ApiKeyOption = Annotated[
    str | None, typer.Option("--api-key", envvar="CASCADE_API_KEY", help="client key (env CASCADE_API_KEY)")
]
ConcurrencyOption = Annotated[
    int, typer.Option(min=1, max=64, help="requests in flight at once (queueing shows in the latency)")
]
TimeoutOption = Annotated[float, typer.Option("--timeout-s", min=1, help="per-request timeout")]
RetriesOption = Annotated[int, typer.Option(min=0, max=10, help="retries of a 429/5xx/connection failure")]
TemperatureOption = Annotated[float, typer.Option(min=0, help="sampling temperature of every request")]
MaxTokensOption = Annotated[
    int | None,
    typer.Option(
        min=1,
        help="max_tokens for questions without their own (default: not sent, the gateway's model "
        "defaults apply); give the value `cascade collect` used to replay its conditions",
    ),
]
LimitOption = Annotated[int | None, typer.Option(min=1, help="only the first N questions")]
ConfidenceOption = Annotated[
    float, typer.Option(min=0.5, max=0.999, help="confidence level of the intervals")
]
StreamOption = Annotated[
    bool,
    typer.Option(
        "--stream",
        help="stream every request, as a chat client does, and report the time to the first "
        "content token per tier next to the whole answer's",
    ),
]
StrictOption = Annotated[
    bool, typer.Option("--strict", help=f"exit {EXIT_FLAGGED} when any flag is raised (for CI)")
]


def replay(
    prompts: PromptsArgument,
    gateway: GatewayOption,
    output: OutputOption,
    tiers: TiersOption = None,
    budgets: BudgetsOption = None,
    policy_file: PolicyOption = None,
    html: HtmlOption = None,
    api_key: ApiKeyOption = None,
    concurrency: ConcurrencyOption = 2,
    timeout_s: TimeoutOption = 300.0,
    retries: RetriesOption = 2,
    temperature: TemperatureOption = 0.0,
    max_tokens: MaxTokensOption = None,
    limit: LimitOption = None,
    confidence: ConfidenceOption = 0.95,
    strict: StrictOption = False,
    stream: StreamOption = False,
) -> None:
    """Send a labelled prompt set through a running gateway once per tier and per budget, grade the
    answers, and report realized quality, cost per request (x-cascade-cost-usd), escalation rate
    (x-cascade-escalated) and latency p50/p95 per tier (with --stream, also the time to the first
    content token), each with a confidence interval, next to
    what the policy expects (tiers.T.expected.heldout when the policy has it, else tiers.T.expected;
    for a budget, the envelope point the gateway picks; from the questions' kind section).
    An expectation outside its interval is flagged, and so is a served policy (x-cascade-policy)
    other than --policy.

    Questions are rendered and graded exactly as `cascade collect` does. Resumable: rows already in
    <stem>.requests.jsonl are not sent again. Exit codes: 0 done, 1 error or failed requests (rerun
    to retry them), 3 flags raised with --strict, 130 interrupted.
    """
    from replay.run import ReplayOptions

    questions = _load_questions(prompts, limit)
    policy, base, arms = _plan(gateway, policy_file, _split(tiers), budgets or [], api_key, timeout_s)
    options = ReplayOptions(api_key, temperature, max_tokens, concurrency, timeout_s, retries, stream)
    results = results_path(output)
    done = _done_pairs(results, arms, options)

    summary = _run(base, questions, arms, done, options, results)

    command = _command_line(
        prompts, gateway, output, _split(tiers), budgets or [], policy_file, max_tokens, temperature, limit
    )
    if stream:
        command += " --stream"
    report = _report(
        base, prompts, questions, arms, policy, policy_file, options, results, confidence, command
    )
    _write_outputs(report, output, html)
    _exit_for(summary, report, strict)


def _report(
    base: str,
    prompts: Path,
    questions: list[Any],
    arms: list[Any],
    policy: Any,
    policy_file: Path | None,
    options: Any,
    results: Path,
    confidence: float,
    command: str,
) -> dict[str, Any]:
    """The report of every row now in the results file, this run's and the previous runs'."""
    from collection.runs_writer import read_rows
    from policies.tool_calls import request_kind
    from replay.report import build_report
    from replay.run import request_body

    return build_report(
        gateway=base,
        prompts_file=str(prompts),
        questions=[q.query_id for q in questions],
        arms=arms,
        rows=read_rows(results, ("arm", "query_id")),
        policy=policy,
        policy_file=str(policy_file) if policy_file else None,
        confidence=confidence,
        request=options.request_fields(),
        results_file=str(results),
        command=command,
        question_kinds={q.query_id: request_kind(request_body(q, options)) for q in questions},
    )


def _plan(
    gateway: str,
    policy_file: Path | None,
    tiers: list[str],
    budgets: list[float],
    api_key: str | None,
    timeout_s: float,
) -> tuple[Any, str, list[Any]]:
    """The policy (or None), the gateway's base URL and the arms to replay (a tier or a budget each).

    Without --tier and --max-cost-usd, every tier of the policy, else every tier the gateway lists.
    """
    from policies import PolicyInvalidError, load_policy
    from replay.run import Arm, ReplayError, gateway_base, served_tiers

    try:
        policy = load_policy(policy_file) if policy_file else None
        base = gateway_base(gateway)
        available = asyncio.run(served_tiers(base, api_key, min(timeout_s, 30.0)))
    except (PolicyInvalidError, ReplayError) as exc:
        fail(str(exc))
    tier_names = tiers
    if not tier_names and not budgets:
        tier_names = list(policy.tiers) if policy else available
        if not tier_names:
            fail(f"the gateway at {base} lists no cascade/<tier> model (no policy loaded?); pass --tier")
    arms = [Arm(tier=t) for t in dict.fromkeys(tier_names)]
    arms += [Arm(max_cost_usd=float(b)) for b in dict.fromkeys(budgets)]
    return policy, base, arms


def _read_results(results: Path) -> list[dict[str, Any]]:
    """The rows already in the results file (one per arm and question)."""
    from collection.runs_writer import RunsFileError, read_rows

    try:
        return read_rows(results, ("arm", "query_id"))
    except RunsFileError as exc:
        fail(str(exc))


def _done_pairs(results: Path, arms: list[Any], options: Any) -> set[tuple[str, str]]:
    """The (arm, question) pairs a previous run finished with the same request options."""
    previous = _read_results(results)
    _check_same_options(previous, arms, options, results)
    return {(str(r["arm"]), str(r["query_id"])) for r in previous}


def _exit_for(summary: Any, report: dict[str, Any], strict: bool) -> None:
    """Fail when requests failed (a rerun retries them); exit 3 on flags under --strict."""
    if summary.failed:
        for line in summary.errors:
            typer.echo(f"  {line}", err=True)
        fail(f"{summary.failed} requests failed; run the same command again to retry them")
    if strict and report["flags"]:
        raise typer.Exit(EXIT_FLAGGED)


def _command_line(
    prompts: Path,
    gateway: str,
    output: Path,
    tiers: list[str],
    budgets: list[float],
    policy_file: Path | None,
    max_tokens: int | None,
    temperature: float,
    limit: int | None,
) -> str:
    """The command that reproduces this run's requests (recorded in the report)."""
    words = ["cascade", "replay", str(prompts), "--gateway", gateway, "-o", str(output)]
    words += [f"--tier={tier}" for tier in tiers] + [f"--max-cost-usd={budget!r}" for budget in budgets]
    optional: dict[str, object] = {"--policy": policy_file, "--max-tokens": max_tokens, "--limit": limit}
    optional["--temperature"] = temperature or None
    words += [f"{flag}={value}" for flag, value in optional.items() if value is not None]
    return shlex.join(words)


def _load_questions(prompts: Path, limit: int | None) -> list[Any]:
    """The prompt set, with every label checked by its grader before anything is sent."""
    from collection.prompts import PromptSetError, load_prompts
    from graders import GraderError, grade

    try:
        questions = load_prompts(prompts, limit)
    except PromptSetError as exc:
        fail(str(exc))
    for question in questions:
        try:
            grade(question.grader, "", question.answer, question.aliases)
        except GraderError as exc:
            fail(f"{prompts}: question {question.query_id!r}: {exc}")
    return questions


def _check_same_options(previous: list[dict[str, Any]], arms: list[Any], options: Any, results: Path) -> None:
    """Refuse to mix rows made with other request options into one report."""
    keys = {arm.key for arm in arms}
    wanted = options.request_fields()
    for row in previous:
        streamed = bool(row.get("stream")) != options.stream  # absent in rows of runs that did not stream
        if row["arm"] in keys and (streamed or any(row.get(k) != v for k, v in wanted.items())):
            theirs = {k: row.get(k) for k in wanted}
            fail(
                f"{results} holds results sent with {theirs}, this run asks for {wanted}; "
                "use the same options, another --output, or delete that file"
            )


def _run(
    base: str, questions: list[Any], arms: list[Any], done: set[tuple[str, str]], options: Any, results: Path
) -> Any:
    """Send the missing pairs under a progress bar (one line per arm)."""
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeRemainingColumn

    from collection.runs_writer import RunsWriter
    from replay.run import ReplayError
    from replay.run import replay as run_replay

    wanted = {(a.key, q.query_id) for q in questions for a in arms}
    typer.echo(
        f"{len(questions)} questions x {len(arms)} ({', '.join(a.key for a in arms)}) through {base}; "
        f"{len(wanted & done)} already in {results}",
        err=True,
    )
    progress = Progress(
        TextColumn("{task.description:<24}"), BarColumn(), MofNCompleteColumn(), TimeRemainingColumn()
    )
    try:
        with progress, RunsWriter(results) as writer:
            tasks = {
                a.key: progress.add_task(
                    a.key, total=len(questions), completed=sum((a.key, q.query_id) in done for q in questions)
                )
                for a in arms
            }
            summary = asyncio.run(
                run_replay(
                    base,
                    questions,
                    arms,
                    writer,
                    done,
                    options,
                    on_progress=lambda key: progress.advance(tasks[key]),
                )
            )
    except ReplayError as exc:
        fail(str(exc))
    except KeyboardInterrupt:
        typer.secho(
            f"interrupted; finished requests are kept in {results}: run the same command again to continue",
            fg=typer.colors.YELLOW,
            err=True,
        )
        raise typer.Exit(EXIT_INTERRUPTED) from None
    typer.echo(
        f"sent {summary.written}, skipped {summary.skipped} already done, {summary.failed} failed", err=True
    )
    return summary


def _write_outputs(report: dict[str, Any], output: Path, html: Path | None) -> None:
    from rich.console import Console

    from replay.render import print_report, write_html

    output.parent.mkdir(parents=True, exist_ok=True)
    output.write_text(json.dumps(report, indent=2) + "\n", encoding="utf-8")
    print_report(Console(), report)
    typer.echo(f"wrote {output}" + (f" and {write_html(report, html)}" if html else ""), err=True)
