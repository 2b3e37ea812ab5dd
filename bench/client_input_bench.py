"""Client input as data: the stall of a backtracking pattern, of unclosed call tags, and the memory
of the schema validator cache (docs/benchmarks.md, "Client input bounds").

    PYTHONPATH=. .venv/bin/python bench/client_input_bench.py pattern|tags|cache

Run from a checkout's root; the same script measures any revision (it uses only
``policies.answer_checks.schema_violation`` and ``policies.tool_calls.calls_in_content``).
"""

import gc
import sys
import time

import orjson

from policies.answer_checks import schema_violation
from policies.tool_calls import calls_in_content


def rss_mb() -> float:
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024
    return 0.0


def pattern_stall() -> None:
    schema = {"type": "string", "pattern": "^(a+)+$"}
    for n in (22, 24, 26, 27):
        t0 = time.perf_counter()
        try:
            result = schema_violation(schema, "a" * n + "!")
        except Exception as exc:
            result = f"raised {type(exc).__name__}"
        print(f"pattern ^(a+)+$ vs {n} a's + '!': {time.perf_counter() - t0:.3f} s -> {str(result)[:60]!r}")


def tags_stall() -> None:
    for n in (5_000, 20_000):
        text = "<tool_call>" * n
        t0 = time.perf_counter()
        calls_in_content(text)
        print(f"{n} unclosed <tool_call> tags: {time.perf_counter() - t0:.3f} s")


def cache_memory() -> None:
    gc.collect()
    before = rss_mb()
    print(f"start: RSS {before:.0f} MB", flush=True)
    for i in range(300):
        # 1,800 properties: 222 KB, within the schema size the gateway accepts (256 KiB).
        props = {f"p{i}_{j}": {"type": "string", "description": "x" * 80} for j in range(1800)}
        schema = {"type": "object", "properties": props}
        schema_violation(schema, {"a": 1})
        if i % 50 == 49:
            print(f"  after {i + 1}: RSS {rss_mb():.0f} MB", flush=True)
    gc.collect()
    size = len(orjson.dumps(schema))
    print(
        f"300 distinct schemas of {size / 1024:.0f} KB: RSS {before:.0f} MB -> {rss_mb():.0f} MB "
        f"(+{rss_mb() - before:.0f} MB)"
    )


if __name__ == "__main__":
    {"pattern": pattern_stall, "tags": tags_stall, "cache": cache_memory}[sys.argv[1]]()
