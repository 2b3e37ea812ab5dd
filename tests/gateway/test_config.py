"""Gateway config: YAML + CASCADE_* overrides, one-line errors."""

from __future__ import annotations

from pathlib import Path

import pytest

from gateway.config import ConfigError, PriceConfig, Settings

CONFIG = """
models:
  small:
    base_url: http://127.0.0.1:9001/v1/
    model: smollm2-135m
    api_key_env: SMALL_KEY
    price: {input_per_mtok: 1.0, output_per_mtok: 2.0}
    timeout_s: 5
  large:
    base_url: http://127.0.0.1:9002/v1
    model: qwen
    price: {per_query_usd: 0.001}
policy: policies/demo.json
limits: {max_body_bytes: 4096}
"""


@pytest.fixture
def config_file(tmp_path: Path) -> Path:
    path = tmp_path / "gateway.yaml"
    path.write_text(CONFIG)
    return path


def test_loads_yaml_and_resolves_relative_policy_against_config_dir(config_file: Path) -> None:
    settings = Settings.from_yaml(config_file)
    assert settings.models["small"].base_url == "http://127.0.0.1:9001/v1"
    assert settings.models["small"].timeout_s == 5
    assert settings.policy == str(config_file.parent / "policies" / "demo.json")
    assert settings.redis_url is None
    assert settings.limits.max_body_bytes == 4096
    assert settings.limits.request_timeout_s == 120


def test_environment_overrides_yaml(config_file: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("CASCADE_REDIS_URL", "redis://127.0.0.1:6379/0")
    monkeypatch.setenv("CASCADE_POLICY", "redis://127.0.0.1:6379/0")
    monkeypatch.setenv("CASCADE_LIMITS__REQUEST_TIMEOUT_S", "7")
    settings = Settings.from_yaml(config_file)
    assert settings.redis_url == "redis://127.0.0.1:6379/0"
    assert settings.policy_is_redis
    assert settings.limits.request_timeout_s == 7
    assert settings.limits.max_body_bytes == 4096  # the rest of the section still comes from YAML


def test_environment_overrides_one_field_of_one_model(
    config_file: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("CASCADE_MODELS__LARGE__BASE_URL", "https://api.example.com/v1")
    settings = Settings.from_yaml(config_file)
    assert settings.models["large"].base_url == "https://api.example.com/v1"
    assert settings.models["large"].model == "qwen"
    assert settings.models["small"].base_url == "http://127.0.0.1:9001/v1"


def test_api_key_is_read_from_the_named_variable_only(
    config_file: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("SMALL_KEY", "sk-secret")
    settings = Settings.from_yaml(config_file)
    assert settings.models["small"].api_key() == "sk-secret"
    assert settings.models["large"].api_key() is None
    assert "sk-secret" not in repr(settings)


def test_price_per_token_and_per_query() -> None:
    assert PriceConfig(input_per_mtok=1.0, output_per_mtok=2.0).cost_usd(1000, 500) == pytest.approx(0.002)
    assert PriceConfig(per_query_usd=0.01).cost_usd(10**6, 10**6) == 0.01


@pytest.mark.parametrize(
    ("text", "fragment"),
    [
        ("models: [1, 2]\npolicy: p.json\n", "models"),
        ("models:\n  cascade: {base_url: 'http://x', model: m}\npolicy: p\n", "reserved"),
        ("models:\n  a: {base_url: 'http://x', model: m, typo: 1}\npolicy: p\n", "typo"),
        ("models:\n  a: {base_url: 'ftp://x', model: m}\npolicy: p\n", "base_url"),
        ("models:\n  a: {base_url: 'http://x', model: m, price: {}}\npolicy: p\n", "price"),
        ("models: {a: [\n", "not valid YAML"),
        ("- 1\n", "mapping"),
    ],
)
def test_bad_config_is_a_one_line_error(tmp_path: Path, text: str, fragment: str) -> None:
    path = tmp_path / "bad.yaml"
    path.write_text(text)
    with pytest.raises(ConfigError) as info:
        Settings.from_yaml(path)
    assert fragment in str(info.value)
    assert "\n" not in str(info.value)


def test_missing_file_is_a_config_error(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="cannot read"):
        Settings.from_yaml(tmp_path / "absent.yaml")
