"""``cascade models check``: what each model of a gateway config really returns about logprobs.

The ``cascade models`` group belongs to the local pool (``localpool.cli``); this command reads a
gateway config, so it lives here and ``cascade_cli.main`` mounts it on that group.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer

from cli_failure import fail

if TYPE_CHECKING:
    from gateway.upstream.models_check import ModelReport

# As `cascade serve`: a config it cannot use exits 2; models that disagree or cannot be reached exit 1.
_CONFIG_ERROR = 2
_DISAGREES = 1


def check(
    config: Annotated[
        Path,
        typer.Option(
            "--config", "-c", help="gateway YAML config whose models to check (docs/contracts.md#config)"
        ),
    ],
    names: Annotated[
        list[str] | None,
        typer.Option("--model", "-m", help="check only this model (repeatable; default: all)"),
    ] = None,
    top_k: Annotated[
        int,
        typer.Option(
            "--top-k", "-k", min=1, max=20, help="alternatives asked of a model declaring no max_top_logprobs"
        ),
    ] = 20,
    as_json: Annotated[bool, typer.Option("--json", help="one JSON document instead of the table")] = False,
) -> None:
    """Call each model once asking for logprobs; report what it returns and whether its declared
    capabilities agree (exit 1 if one disagrees or cannot be reached)."""
    from gateway.config.settings import ConfigError, Settings
    from gateway.upstream.models_check import problems, run_checks

    try:
        settings = Settings.from_yaml(config)
    except ConfigError as exc:
        fail(str(exc), code=_CONFIG_ERROR)
    unknown = sorted(set(names or ()) - set(settings.models))
    if unknown:
        fail(
            f"{config}: no model {', '.join(unknown)} (configured: {', '.join(sorted(settings.models))})",
            code=_CONFIG_ERROR,
        )
    reports = run_checks(settings, names, top_k)
    found = problems(reports)
    if as_json:
        document = {"config": str(config), "agree": not found, "models": [r.as_dict() for r in reports]}
        typer.echo(json.dumps(document, indent=2))
    else:
        _print_table(reports)
        for line in found:
            typer.echo(line)
    if found:
        raise typer.Exit(_DISAGREES)


def _print_table(reports: list[ModelReport]) -> None:
    from rich.console import Console
    from rich.table import Table

    table = Table(title="declared capabilities against one call per model")
    for column in (
        "model",
        "upstream",
        "reachable",
        "logprobs",
        "alternatives",
        "refused",
        "latency",
        "cost",
        "declared",
        "agrees",
    ):
        table.add_column(column)
    for r in reports:
        table.add_row(
            r.name,
            r.upstream,
            "yes" if r.reachable else "no",
            _yes_no(r.logprobs),
            _alternatives(r),
            "yes" if r.refused_logprobs else "no",
            "-" if r.latency_ms is None else f"{r.latency_ms:.0f} ms",
            f"${r.cost_usd:.6f}",
            _declared(r.declared),
            "yes" if r.agrees else "NO",
        )
    Console(width=160).print(table)


def _yes_no(value: bool | None) -> str:
    return "-" if value is None else ("yes" if value else "no")


def _alternatives(report: ModelReport) -> str:
    """Alternatives per position returned, of those asked (``3-5/20``; ``-`` without logprobs)."""
    low, high = report.alternatives_min, report.alternatives_max
    if low is None or high is None:
        return f"-/{report.asked_alternatives}"
    given = str(high) if low == high else f"{low}-{high}"
    return f"{given}/{report.asked_alternatives}"


def _declared(declared: dict[str, object]) -> str:
    if not declared.get("logprobs"):
        return "no logprobs"
    cap = declared.get("max_top_logprobs")
    form = declared.get("logprobs_form")
    return f"logprobs, {'no cap' if cap is None else f'cap {cap}'}, {form}"


def register(models_app: typer.Typer) -> None:
    """Mount ``check`` on the ``cascade models`` group."""
    models_app.command("check")(check)
