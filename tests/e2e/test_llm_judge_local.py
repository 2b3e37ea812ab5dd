"""The llm judge against a real llama-server model of the local pool (the reference model)."""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path

import pytest

from localpool.install import model_is_installed
from localpool.manifest import load_manifest
from localpool.paths import PoolPaths
from localpool.pool import ServerOptions, server_command
from localpool.process import start_detached, stop, wait_healthy
from localpool.server_build import llama_server_binary
from money import Price
from tests.support.ports import free_port
from traffic.judges.llm import LLMJudge

pytestmark = pytest.mark.e2e
JUDGE = "qwen2.5-coder-1.5b"
AGREEING = [
    ("What is the capital of France?", "Paris", "The capital of France is Paris."),
    ("How many legs does a spider have?", "8", "A spider has eight legs."),
    ("What is 12 times 12?", "144", "12 x 12 = 144"),
]
DISAGREEING = [
    ("What is the capital of France?", "Paris", "The capital of France is Berlin."),
    ("How many legs does a spider have?", "8", "A spider has six legs."),
    ("What is 12 times 12?", "144", "12 x 12 = 124"),
]


@pytest.fixture(scope="module")
def judge_url(repo_root: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """The judge model served by llama-server on a free port (installed by scripts/setup.sh)."""
    home = os.environ.get("CASCADE_HOME")
    paths = PoolPaths(Path(home) if home else repo_root / ".cascade")
    manifest = load_manifest()
    spec = manifest.models[JUDGE].model_copy(update={"port": free_port()})
    binary = llama_server_binary()
    if binary is None or not model_is_installed(spec, paths):
        pytest.fail(f"local pool not installed (llama-server: {binary}, {JUDGE}); run scripts/setup.sh")
    run = tmp_path_factory.mktemp("judge")
    command = server_command(
        binary, paths.model_file(spec.file), JUDGE, spec, ServerOptions.from_env(servers=1)
    )
    record = start_detached(command, run / "server.log", run / "server.pid", port=spec.port)
    try:
        wait_healthy(
            f"http://127.0.0.1:{spec.port}/health",
            pid=record.pid,
            log_path=run / "server.log",
            timeout_s=120,
            name=JUDGE,
        )
        yield f"http://127.0.0.1:{spec.port}/v1"
    finally:
        stop(record.pid, grace_s=10)


async def test_real_judge_says_yes_to_agreeing_answers_and_no_to_contradictions(judge_url: str) -> None:
    judge = LLMJudge(
        judge_url, JUDGE, price=Price(per_query_usd=0), timeout_s=120
    )  # what it costs is not tested here
    try:
        agree = [await judge.judge(*pair) for pair in AGREEING]
        disagree = [await judge.judge(*pair) for pair in DISAGREEING]
    finally:
        await judge.aclose()
    agree_labels = [v.correct for v in agree]
    disagree_labels = [v.correct for v in disagree]
    assert None not in agree_labels and None not in disagree_labels, (agree, disagree)
    # Each agreeing pair is labelled above the contradicting pair of the same question.
    for yes, no in zip(agree_labels, disagree_labels, strict=True):
        assert yes > no, (agree, disagree)
    # No absolute cut: this 1.5B judge leans to "yes" (contradictions got 0.34-0.79 when measured, the
    # agreeing pairs 0.98-0.99), so only the order is a property of the judge worth asserting.
    print(
        "agreeing",
        [round(x, 3) for x in agree_labels],
        "contradicting",
        [round(x, 3) for x in disagree_labels],
    )
