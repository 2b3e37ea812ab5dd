"""How the demo cascade's held-out payoff depends on the traffic mix and on the price of a generated token.

    .venv/bin/python bench/local/mix_sensitivity.py [--shares 0.667,0.8,0.9] [--output-multipliers 1,4]
        [--splits 50]

From the committed demo runs (data/local/arithmetic-runs.jsonl.gz, 80% one-step questions), for each
share of one-step questions (multi-step questions kept whole, one-step ones dropped at random, or the
other way round, seed 0) and each price of a generated token (a multiple of the prompt-token price of
localpool/models.yaml), runs ``cascade evaluate`` (min_probability, 50 held-out splits) and prints the
envelope's normalized gain and where its held-out median first reaches 95% of the best single member.
"""

from __future__ import annotations

import argparse
import gzip
import json
import random
import subprocess
import sys
import tempfile
from pathlib import Path

import yaml

from localpool.heldout_table import build_table
from localpool.manifest import load_manifest

RUNS = Path("data/local/arithmetic-runs.jsonl.gz")
PROMPT_SETS = (Path("collection/data/arithmetic.jsonl"), Path("collection/data/arithmetic-quick.jsonl"))


def one_step_ids() -> set[str]:
    """query_ids of the one-step questions of the demo's calibration sets."""
    ids = set()
    for path in PROMPT_SETS:
        for line in path.read_text(encoding="utf-8").splitlines():
            record = json.loads(line)
            if record["subject"].startswith("quick"):
                ids.add(record["query_id"])
    return ids


def subset(rows: list[dict], quick: set[str], share: float, seed: int = 0) -> list[dict]:
    """Rows of a random subset of the queries with ``share`` one-step questions (as many kept as possible)."""
    queries = sorted({row["query_id"] for row in rows})
    one = [q for q in queries if q in quick]
    multi = [q for q in queries if q not in quick]
    rng = random.Random(seed)
    if share * len(multi) >= (1 - share) * len(one):  # too few one-step: drop multi-step ones
        multi = rng.sample(multi, round(len(one) * (1 - share) / share))
    else:
        one = rng.sample(one, round(len(multi) * share / (1 - share)))
    keep = set(one) | set(multi)
    return [row for row in rows if row["query_id"] in keep]


def price_sheet(multiplier: float) -> dict:
    """Every member at its server's prompt-token price, generated tokens at ``multiplier`` x that."""
    manifest = load_manifest()
    models = {}
    for name, member in manifest.members.items():
        prompt = manifest.models[member.server].price.input_per_mtok
        models[name] = {"input_per_mtok": prompt, "output_per_mtok": prompt * multiplier}
    return {"models": models}


def main(argv: list[str] | None = None) -> None:
    """Print one Markdown row per (share, multiplier)."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--shares", default="0.667,0.8,0.9")
    parser.add_argument("--output-multipliers", default="1,4")
    parser.add_argument("--splits", type=int, default=50)
    args = parser.parse_args(argv)
    with gzip.open(RUNS, "rt", encoding="utf-8") as handle:
        rows = [json.loads(line) for line in handle]
    quick = one_step_ids()
    tiers = Path("data/local/arithmetic-tiers.yaml")
    print(
        "| one-step share | questions | generated token price | envelope gain | 95% of best at (cost share) |"
    )
    print("|---|---|---|---|---|")
    with tempfile.TemporaryDirectory() as tmp:
        for share in (float(s) for s in args.shares.split(",")):
            runs = Path(tmp) / f"runs-{share}.jsonl"
            chosen = subset(rows, quick, share)
            runs.write_text("".join(json.dumps(row) + "\n" for row in chosen), encoding="utf-8")
            for multiplier in (float(m) for m in args.output_multipliers.split(",")):
                prices = Path(tmp) / f"prices-{multiplier}.yaml"
                prices.write_text(yaml.safe_dump(price_sheet(multiplier)), encoding="utf-8")
                report = Path(tmp) / f"report-{share}-{multiplier}"
                command = [
                    sys.executable,
                    "-m",
                    "cascade_cli.main",
                    "evaluate",
                    str(runs),
                    "--prices",
                    str(prices),
                ]
                command += ["--scorer", "min_probability", "--top-k", "10", "--splits", str(args.splits)]
                command += [
                    "--seed",
                    "0",
                    "--methods",
                    "envelope,envelope_hull,single",
                    "--report",
                    str(report),
                ]
                subprocess.run(command, check=True, capture_output=True)
                table = build_table(report, tiers)
                reach = table["reach_95_percent_of_best"]["envelope"]
                best = table["best_single"]
                where = "not reached" if reach is None else f"{reach['cost_usd'] / best['cost_usd']:.0%}"
                print(
                    f"| {share:.2f} | {table['n_queries']} | {multiplier:g}x prompt | "
                    f"{table['normalized_gain']['envelope']:.3f} | {where} |"
                )


if __name__ == "__main__":
    main()
