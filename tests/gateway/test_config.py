"""Gateway config: YAML + CASCADE_* overrides, one-line errors."""

from __future__ import annotations

from pathlib import Path

import pytest

from gateway.config.settings import ConfigError, Settings
from money import Price
from tests.support.data_files import PLAUT_PRICES

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


def test_secret_values_are_every_key_and_url_password_the_config_refers_to(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("SMALL_KEY", "sk-upstream")
    monkeypatch.setenv("CASCADE_API_KEYS", "sk-client-a, sk-client-b")
    monkeypatch.setenv("CASCADE_ADMIN_KEY", "sk-admin")
    settings = Settings.from_mapping(
        {
            "models": {
                "small": {
                    "base_url": "http://u:url-pass@127.0.0.1:9001/v1",
                    "model": "s",
                    "api_key_env": "SMALL_KEY",
                    "price": {"per_query_usd": 0},
                }
            },
            "policy": "redis://:policy-pass@127.0.0.1:6379/0",
            "redis_url": "redis://:redis-pass@127.0.0.1:6379/0",
        }
    )
    assert sorted(settings.secret_values()) == sorted(
        ["sk-upstream", "url-pass", "sk-client-a", "sk-client-b", "sk-admin", "redis-pass", "policy-pass"]
    )


def test_config_prices_are_the_shared_price_model(config_file: Path) -> None:
    settings = Settings.from_yaml(config_file)
    assert isinstance(settings.models["small"].price, Price)
    assert settings.models["small"].price.cost_usd(1000, 500) == pytest.approx(0.002)
    assert settings.models["large"].price.cost_usd(10**6, 10**6) == 0.001


@pytest.mark.parametrize("price", [{}, {"price": None}])
def test_a_model_without_price_is_a_config_error_not_free(price: dict) -> None:
    # As a price without a form is (money.prices): a forgotten price must not serve a model free.
    model = {"base_url": "http://x", "model": "m", **price}
    with pytest.raises(ConfigError, match=r"models\.a: .*price is required") as info:
        Settings.from_mapping({"models": {"a": model}, "policy": "p"})
    assert "\n" not in str(info.value)


def test_a_free_model_says_so() -> None:
    model = {"base_url": "http://x", "model": "m", "price": {"per_query_usd": 0}}
    settings = Settings.from_mapping({"models": {"a": model}, "policy": "p"})
    assert settings.models["a"].price.cost_usd(10**6, 10**6) == 0.0


@pytest.mark.parametrize(
    ("text", "fragment"),
    [
        ("models: [1, 2]\npolicy: p.json\n", "models"),
        (
            "models:\n  cascade: {base_url: 'http://x', model: m, price: {per_query_usd: 0}}\npolicy: p\n",
            "reserved",
        ),
        (
            "models:\n  a: {base_url: 'http://x', model: m, price: {per_query_usd: 0}, typo: 1}\npolicy: p\n",
            "typo",
        ),
        ("models:\n  a: {base_url: 'ftp://x', model: m, price: {per_query_usd: 0}}\npolicy: p\n", "base_url"),
        ("models:\n  a: {base_url: 'http://x', model: m, price: {}}\npolicy: p\n", "price needs"),
        ("models:\n  a: {base_url: 'http://x', model: m, price: {input_per_mtok: 1}}\npolicy: p\n", "pair"),
        ("models:\n  a: {base_url: 'http://x', model: m, price: {per_query_usd: -1}}\npolicy: p\n", "price"),
        (
            "models:\n  a: {base_url: 'http://x', model: m, price: {per_query_usd: 0}}\npolicy: p\n"
            "trusted_proxies: [10.0.0.1/8]\n",
            "trusted_proxies",
        ),
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


def test_a_price_with_both_forms_is_accepted_and_priced_by_tokens() -> None:
    # plaut-mc's price sheet gives both forms for every model; the gateway takes the same entries.
    import yaml

    sheet = yaml.safe_load(PLAUT_PRICES.read_text())["models"]
    models = {
        name: {"base_url": "http://127.0.0.1:9/v1", "model": name, "price": entry}
        for name, entry in sheet.items()
    }
    settings = Settings.from_mapping({"models": models, "policy": "p.json"})
    for name, entry in sheet.items():
        price = settings.models[name].price
        expected = (100 * entry["input_per_mtok"] + 7 * entry["output_per_mtok"]) / 1e6
        assert price.cost_usd(100, 7) == pytest.approx(expected)
        assert price.cost_usd(None, None) == entry["per_query_usd"]


_MODEL = "models:\n  a: {base_url: 'http://x', model: m, price: {per_query_usd: 0}}\npolicy: p\n"


@pytest.mark.parametrize(
    ("text", "fragment"),
    [
        (_MODEL + "redis_url: 'redis://127.0.0.1:notaport/0'\n", "redis_url: Value error, not a usable"),
        (_MODEL + "redis_url: 'http://127.0.0.1:6379'\n", "redis_url: Value error, a Redis URL must"),
        (_MODEL + "redis_url: 'redis://h:99999/0'\n", "Port out of range"),
        (_MODEL + "redis_url: 'redis://h:6379/zero'\n", "database of a Redis URL must be a number"),
        (_MODEL + "redis_url: 'redis://'\n", "needs a host"),
        (_MODEL.replace("policy: p", "policy: 'redis://127.0.0.1:x/0'"), "policy: Value error, not a usable"),
    ],
    ids=["port", "scheme", "port-range", "database", "no-host", "policy-url"],
)
def test_a_malformed_redis_url_is_a_one_line_config_error(tmp_path: Path, text: str, fragment: str) -> None:
    path = tmp_path / "bad.yaml"
    path.write_text(text.replace("redis://h:", "redis://user:s3cret-pw@h:"))
    with pytest.raises(ConfigError) as info:
        Settings.from_yaml(path)
    assert fragment in str(info.value)
    assert "\n" not in str(info.value) and "s3cret-pw" not in str(info.value)


def test_well_formed_redis_urls_load() -> None:
    for url in [
        "redis://127.0.0.1:6379/0",
        "rediss://:pw@cache.internal:6380",
        "unix:///run/redis.sock?db=2",
    ]:
        models = {"a": {"base_url": "http://x", "model": "m", "price": {"per_query_usd": 0}}}
        settings = Settings.from_mapping({"models": models, "policy": url, "redis_url": url})
        assert settings.redis_url == url and settings.policy_is_redis


def test_tool_calls_is_a_capability_also_read_where_older_configs_have_it() -> None:
    def model(**fields: object) -> dict[str, object]:
        return {"base_url": "http://x", "model": "m", "price": {"per_query_usd": 0}, **fields}

    declared = {
        "now": model(capabilities={"tool_calls": "content", "max_top_logprobs": 5}),
        "before": model(tool_calls="content", capabilities={"max_top_logprobs": 5}),
        "bare": model(tool_calls="content"),
        "native": model(),
    }
    settings = Settings.from_mapping({"models": declared, "policy": "p"})
    forms = {name: config.capabilities.tool_calls for name, config in settings.models.items()}
    assert forms == {"now": "content", "before": "content", "bare": "content", "native": "native"}
    assert settings.models["before"].capabilities == settings.models["now"].capabilities
    twice = model(tool_calls="content", capabilities={"tool_calls": "content"})
    with pytest.raises(ConfigError, match="tool_calls is set twice"):
        Settings.from_mapping({"models": {"a": twice}, "policy": "p"})
