"""Time the confidence scorers on a synthetic 100-token answer with K=15 alternatives per token.

Run by hand (not part of the test suite):

    .venv/bin/python bench/scorers_bench.py [--tokens 100] [--top-k 15] [--repeat 2000]

Prints microseconds per answer (best of 5 rounds of ``--repeat`` calls) for each scorer, for the
whole ``score_logprobs`` call (parsing the ``logprobs.content`` list into arrays included).
"""

from __future__ import annotations

import argparse
import random
import timeit
from typing import Any

from policies.scorers import SCORERS, score_logprobs


def synthetic_content(tokens: int, top_k: int, seed: int = 0) -> list[dict[str, Any]]:
    """An OpenAI ``logprobs.content`` list shaped like a llama.cpp answer (random logprobs)."""
    rng = random.Random(seed)
    content = []
    for position in range(tokens):
        alternatives = sorted((-rng.expovariate(0.5) for _ in range(top_k)), reverse=True)
        content.append(
            {
                "token": f"t{position}",
                "logprob": alternatives[0],
                "bytes": None,
                "top_logprobs": [
                    {"token": f"a{i}", "logprob": lp, "bytes": None} for i, lp in enumerate(alternatives)
                ],
            }
        )
    return content


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--tokens", type=int, default=100)
    parser.add_argument("--top-k", type=int, default=15)
    parser.add_argument("--repeat", type=int, default=2000)
    args = parser.parse_args()
    content = synthetic_content(args.tokens, args.top_k)
    print(f"{args.tokens}-token answer, K={args.top_k}: microseconds per score_logprobs call")
    for name in SCORERS:
        timer = timeit.Timer(lambda name=name: score_logprobs(content, name, args.top_k))
        best = min(timer.repeat(repeat=5, number=args.repeat)) / args.repeat
        print(f"  {name:<24} {best * 1e6:8.1f} us")


if __name__ == "__main__":
    main()
