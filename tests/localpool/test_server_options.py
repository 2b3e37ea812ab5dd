"""How the pool runs llama-server: each model's context, one KV pool per server, a bounded prompt cache."""

from __future__ import annotations

from pathlib import Path

import pytest
from typer.testing import CliRunner

from cascade_cli.main import app
from localpool.manifest import load_manifest
from localpool.pool import DEFAULT_CACHE_RAM_MIB, ServerOptions, server_command

# The first request of the agent CLIs, in Qwen2.5 tokens (Claude Code 2.1, Codex 0.169, measured).
CLAUDE_CODE_FIRST_REQUEST = 11632
CODEX_FIRST_REQUEST = 6091


@pytest.fixture
def clean_env(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in (
        "CASCADE_LLAMA_CONTEXT",
        "CASCADE_LLAMA_THREADS",
        "CASCADE_LLAMA_PARALLEL",
        "CASCADE_LLAMA_CACHE_RAM",
    ):
        monkeypatch.delenv(name, raising=False)


def _flag(command: list[str], flag: str) -> str:
    return command[command.index(flag) + 1]


def test_each_server_gets_its_models_context_in_one_pool_its_slots_share(clean_env: None) -> None:
    manifest = load_manifest()
    options = ServerOptions.from_env(servers=3)
    for name, spec in manifest.models.items():
        command = server_command(Path("llama-server"), Path("m.gguf"), name, spec, options)
        assert _flag(command, "--ctx-size") == str(spec.context)
        assert "--kv-unified" in command  # one request may use the whole context, not 1/parallel of it
        assert _flag(command, "--parallel") == "2"
        assert _flag(command, "--cache-ram") == str(DEFAULT_CACHE_RAM_MIB)


def test_the_models_agents_are_served_by_hold_an_agent_clis_conversation() -> None:
    models = load_manifest().models
    for name in ("qwen2.5-coder-0.5b", "qwen2.5-coder-1.5b"):
        # The first request and several turns after it, in one slot.
        assert models[name].context >= 2 * CLAUDE_CODE_FIRST_REQUEST > 2 * CODEX_FIRST_REQUEST, name


def test_the_context_is_set_by_the_cli_over_the_environment_over_the_manifest(
    clean_env: None, monkeypatch: pytest.MonkeyPatch
) -> None:
    spec = load_manifest().models["qwen2.5-coder-0.5b"]
    assert ServerOptions.from_env().context_of(spec) == spec.context
    monkeypatch.setenv("CASCADE_LLAMA_CONTEXT", "16384")
    monkeypatch.setenv("CASCADE_LLAMA_CACHE_RAM", "0")
    options = ServerOptions.from_env()
    assert options.context_of(spec) == 16384 and options.cache_ram_mib == 0
    assert ServerOptions.from_env(context=8192).context_of(spec) == 8192


def test_a_context_below_256_tokens_is_refused_by_the_cli(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("CASCADE_HOME", str(tmp_path))
    for command in (["models", "up", "--context", "100"], ["demo", "--context", "100"]):
        result = CliRunner().invoke(app, command)
        assert result.exit_code == 2 and "--context" in result.output, result.output
