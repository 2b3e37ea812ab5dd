"""The options ``cascade calibrate``, ``evaluate`` and ``recalibrate`` share, declared once.

Each alias is the type of a command parameter with its typer option (name, bounds, help), so a
shared option reads, and is documented, the same way in every command: ``prices: PricesOption = None``.
"""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

RunsArgument = Annotated[
    Path,
    typer.Argument(
        help="Runs table, one row per (query, model): .csv(.gz), .parquet or .jsonl "
        "(docs/contracts.md#runs-table)."
    ),
]
TiersOption = Annotated[Path, typer.Option("--tiers", help="TIERS.yaml: default_tier and tier objectives.")]
PricesOption = Annotated[
    Path | None,
    typer.Option("--prices", help="Price sheet YAML (token prices or per_query_usd; else cost_usd)."),
]
ScoreColumnOption = Annotated[
    str | None, typer.Option("--score-column", help="Precomputed confidence column (scorer 'external').")
]
ScorerOption = Annotated[
    str | None,
    typer.Option(
        "--scorer",
        help="Scorer for the 'logprobs' column (docs/contracts.md#scorers; default mean_token_negentropy).",
    ),
]
TopKOption = Annotated[int | None, typer.Option("--top-k", help="Top-K alternatives for the scorer.")]
EquivalenceOption = Annotated[
    str | None,
    typer.Option(
        "--equivalence", help="consistency scorer: exact, numeric, choice or similarity (default exact)."
    ),
]
SamplesOption = Annotated[
    int | None,
    typer.Option("--samples", min=1, max=20, help="consistency scorer: use the first K recorded samples."),
]
ScoreTokensOption = Annotated[
    str,
    typer.Option(
        "--score-tokens",
        help="Tokens the scorer reads: all, or call_values (a call's function name and argument values).",
    ),
]
WhereOption = Annotated[
    list[str] | None,
    typer.Option("--where", metavar="COLUMN=VALUE", help="Keep matching rows (repeatable)."),
]
RandomizeOption = Annotated[
    bool, typer.Option("--randomize", help="Tiers as concave-hull mixtures hitting the budget exactly.")
]
HeldoutOption = Annotated[
    bool,
    typer.Option(
        "--heldout/--no-heldout",
        help="Cross-fit each tier's held-out expectations over random halves of the calibration "
        "queries (expected.heldout).",
    ),
]
HeldoutSplitsOption = Annotated[
    int, typer.Option("--heldout-splits", min=1, help="Splits for the held-out expectations.")
]
PromptsOption = Annotated[
    list[Path] | None,
    typer.Option(
        "--prompts", help="Prompt set(s) of the runs (JSONL): router features from each query's request."
    ),
]
SeedOption = Annotated[int, typer.Option("--seed", help="Seed of the splits, searches and bootstrap.")]
