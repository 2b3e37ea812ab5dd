"""Time scoring a call's decisions (``ScorerSpec.tokens = call_values``) against scoring every token.

Run by hand (not part of the test suite):

    .venv/bin/python bench/call_tokens_bench.py [--runs RUNS.jsonl.gz] [--top-k 15] [--repeat 2000]

The answer is the recorded llama-server reply of tests/support/replies/ (BFCL simple_python_0 by
Qwen2.5-Coder-0.5B: a fenced call, 45 tokens, 5 alternatives each), or with ``--runs`` the runs row
with the longest call in that file. Prints microseconds per call (best of 5 rounds of ``--repeat``
calls): finding the decision tokens alone (``policies.call_tokens.call_value_positions``), then each
scorer with ``tokens`` all and call_values (the whole ``score_logprobs`` call).
"""

from __future__ import annotations

import argparse
import gzip
import json
import timeit
from pathlib import Path
from typing import Any

from policies.call_tokens import call_value_positions
from policies.scorers import SCORERS, score_logprobs

REPLY = Path("tests/support/replies/llama_server_qwen2.5_coder_0.5b_call_as_content.json")


def recorded_answer() -> list[dict[str, Any]]:
    """``logprobs.content`` of the recorded reply."""
    return json.loads(REPLY.read_text())["reply"]["choices"][0]["logprobs"]["content"]


def longest_call(path: Path) -> tuple[str, list[dict[str, Any]]]:
    """(query_id, logprobs) of the runs row whose answer is the longest call."""
    opener = gzip.open if path.name.endswith(".gz") else open
    best: tuple[str, list[dict[str, Any]]] = ("", [])
    with opener(path, "rt", encoding="utf-8") as handle:
        for line in handle:
            row = json.loads(line)
            content = row.get("logprobs") or []
            if len(content) > len(best[1]) and call_value_positions(content):
                best = (f"{row['query_id']} ({row['model']})", content)
    return best


def per_call(function: Any, repeat: int) -> float:
    """Microseconds per call of ``function()``, best of 5 rounds."""
    return min(timeit.Timer(function).repeat(repeat=5, number=repeat)) / repeat * 1e6


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=Path)
    parser.add_argument("--top-k", type=int, default=15)
    parser.add_argument("--repeat", type=int, default=2000)
    args = parser.parse_args()
    if args.runs is None:
        name, content = f"{REPLY.name}", recorded_answer()
    else:
        name, content = longest_call(args.runs)
    positions = call_value_positions(content) or []
    print(f"{name}: {len(content)} tokens, {len(positions)} of them a call's name and values, K={args.top_k}")
    print(
        f"  call_value_positions alone {per_call(lambda: call_value_positions(content), args.repeat):8.1f} us"
    )
    print("  microseconds per score_logprobs call:       all  call_values")
    for scorer in SCORERS:
        whole = per_call(lambda scorer=scorer: score_logprobs(content, scorer, args.top_k), args.repeat)
        values = per_call(
            lambda scorer=scorer: score_logprobs(content, scorer, args.top_k, "call_values"), args.repeat
        )
        print(f"  {scorer:<24} {whole:20.1f} {values:12.1f}")


if __name__ == "__main__":
    main()
