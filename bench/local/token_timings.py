"""CPU time of a prompt token against a generated token, per local pool model (llama-server timings).

    .venv/bin/python bench/local/token_timings.py [--models qwen2.5-coder-0.5b,qwen2.5-coder-1.5b]
        [--requests 5] [--max-tokens 64]

Sends ``--requests`` step-by-step arithmetic questions to each running pool server (``cascade models
up`` first) with the prompt cache off, and reads llama-server's own ``timings`` of each answer:
``prompt_per_token_ms`` (the prompt, evaluated in one batch) and ``predicted_per_token_ms`` (each
generated token, decoded alone). Prints the medians and their ratio, the basis of the pool's stated
price ratio of generated to prompt tokens (docs/local-models.md, "Prices").
"""

from __future__ import annotations

import argparse
import statistics

import httpx

from collection.arithmetic import generate
from localpool.manifest import load_manifest

SYSTEM = "Think step by step: write out each calculation you need, one per line, before giving the result."


def measure(base_url: str, questions: list[str], max_tokens: int) -> tuple[float, float]:
    """Median (prompt ms per token, generated ms per token) over the questions."""
    prompt_ms: list[float] = []
    generated_ms: list[float] = []
    with httpx.Client(timeout=600) as client:
        for question in questions:
            body = {
                "messages": [{"role": "system", "content": SYSTEM}, {"role": "user", "content": question}],
                "temperature": 0,
                "max_tokens": max_tokens,
                "cache_prompt": False,
            }
            response = client.post(f"{base_url}/v1/chat/completions", json=body)
            response.raise_for_status()
            timings = response.json()["timings"]
            prompt_ms.append(float(timings["prompt_per_token_ms"]))
            generated_ms.append(float(timings["predicted_per_token_ms"]))
    return statistics.median(prompt_ms), statistics.median(generated_ms)


def main(argv: list[str] | None = None) -> None:
    """Measure and print one line per model."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--models", default="qwen2.5-coder-0.5b,qwen2.5-coder-1.5b")
    parser.add_argument("--requests", type=int, default=5)
    parser.add_argument("--max-tokens", type=int, default=64)
    parser.add_argument("--host", default="127.0.0.1")
    args = parser.parse_args(argv)
    manifest = load_manifest()
    questions = [record["prompt"] for record in generate(args.requests, seed=7, quick_share=0.0)]
    print("| model | prompt ms / token | generated ms / token | ratio |")
    print("|---|---|---|---|")
    for name in args.models.split(","):
        port = manifest.models[name].port
        prompt, generated = measure(f"http://{args.host}:{port}", questions, args.max_tokens)
        print(f"| {name} | {prompt:.1f} | {generated:.1f} | {generated / prompt:.1f}x |")


if __name__ == "__main__":
    main()
