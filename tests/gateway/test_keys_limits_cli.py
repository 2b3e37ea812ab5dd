"""``cascade keys add`` with rate limits and a budget period, ``cascade keys list`` showing them and
the spend of the current period, and the authenticator reading them (real Redis)."""

from __future__ import annotations

import json
from typing import Any

from typer.testing import CliRunner

from cascade_cli.main import app
from gateway.commands.keys import add_key
from gateway.config.key_settings import BudgetPeriod, RateLimit
from gateway.keys.auth import Authenticator
from tests.support.shared_redis import REDIS_URL

runner = CliRunner()


def cli(*args: str, prefix: str) -> Any:
    return runner.invoke(app, [*args, "--redis", REDIS_URL, "--prefix", prefix])


def test_keys_add_stores_rate_limits_and_a_period_and_list_shows_them(keys, sync_redis) -> None:
    result = cli(
        "keys", "add", "team-a", "--limit-usd", "20", "--rpm", "60", "--tpm", "90000",
        "--rate-limit", "1d:requests=10000", "--period", "monthly", "--timezone", "Europe/Berlin",
        "--rollover-cap-usd", "5",
        prefix=keys.prefix,
    )  # fmt: skip
    assert result.exit_code == 0, result.output
    record = json.loads(next(iter(sync_redis.hgetall(keys.client_keys).values())))
    assert record["rate_limits"] == [
        {"window_s": 60, "requests": 60, "tokens": 90000},
        {"window_s": 86400, "requests": 10000},
    ]
    assert record["budget_period"] == {
        "kind": "monthly",
        "timezone": "Europe/Berlin",
        "rollover_cap_usd": 5.0,
    }
    listed = cli("keys", "list", prefix=keys.prefix)
    assert "period=monthly (Europe/Berlin), rollover up to $5" in listed.stdout
    assert "rate=60 requests + 90000 tokens / 60s, 10000 requests / 86400s" in listed.stdout
    assert "spent=$0.000000" in listed.stdout
    row = json.loads(cli("keys", "list", "--json", prefix=keys.prefix).stdout)
    assert row["window_end"] > row["window_start"] and row["spent_usd"] == 0.0


def test_keys_list_shows_the_spend_of_the_current_period(keys, sync_redis) -> None:
    _, key_id = add_key(sync_redis, "team-b", 1.0, keys, period=BudgetPeriod(kind="none"))
    sync_redis.set(keys.spend(key_id, 0), 250_000_000)
    listed = cli("keys", "list", prefix=keys.prefix)
    assert "period=never resets" in listed.stdout and "spent=$0.250000" in listed.stdout


def test_bad_limits_are_one_line_errors(keys) -> None:
    for args in (
        ("--rate-limit", "60x:requests=1"),
        ("--rate-limit", "1m:requests=0.5"),
        ("--period", "yearly"),
        ("--period", "daily", "--timezone", "Nowhere/City"),
        ("--rollover-cap-usd", "1"),
        ("--no-rate-limits", "--rpm", "5"),
    ):
        result = cli("keys", "add", "bad", *args, prefix=keys.prefix)
        assert result.exit_code == 1 and "Traceback" not in result.output, (args, result.output)


async def test_the_authenticator_gives_a_key_its_own_limits_or_the_defaults(
    keys, sync_redis, async_redis
) -> None:
    own, _ = add_key(
        sync_redis,
        "own",
        2.0,
        keys,
        rate_limits=[{"window_s": 60, "requests": 5}, {"window_s": 60, "tokens": 100}],
        period=BudgetPeriod(kind="weekly"),
    )
    default, _ = add_key(sync_redis, "default", None, keys)
    none, _ = add_key(sync_redis, "none", None, keys, rate_limits=[])
    auth = Authenticator(
        redis=async_redis,
        keys=keys,
        default_limit_usd=9.0,
        default_rate_limits=(RateLimit(window_s=1, requests=50),),
        default_period=BudgetPeriod(kind="daily"),
    )
    await auth.start()
    mine = await auth.authenticate(f"Bearer {own}")
    assert mine.rate_limits == (RateLimit(window_s=60, requests=5, tokens=100),)  # one window, merged
    assert mine.period == BudgetPeriod(kind="weekly") and mine.created_at is not None
    defaults = await auth.authenticate(f"Bearer {default}")
    assert defaults.rate_limits == (RateLimit(window_s=1, requests=50),)
    assert defaults.period == BudgetPeriod(kind="daily") and defaults.limit_usd == 9.0
    assert (await auth.authenticate(f"Bearer {none}")).rate_limits == ()
