"""``cascade keys add|list|revoke``: the client API keys a Redis-backed fleet accepts.

Client keys are printed once at creation; Redis stores only their SHA-256. Replicas see a new or
revoked key within their key cache's lifetime (gateway.keys.auth). A key may carry its own rate limits
(``--rpm``, ``--tpm``, ``--rate-limit``) and budget period (``--period``, ``--timezone``,
``--rollover-cap-usd``; gateway.config.key_settings); without them it gets the config's ``budgets``
defaults. ``list`` shows each key's limits, period and spend in its current window.
"""

from __future__ import annotations

import json
import secrets
import time
from collections.abc import Sequence
from datetime import UTC, datetime
from typing import Annotated, Any

import typer
from pydantic import ValidationError

from gateway.commands.redis_options import CliError, PrefixOption, RedisOption, connect, run_command
from gateway.config.key_settings import (
    BudgetPeriod,
    RateLimit,
    parse_period,
    parse_rate_limit_spec,
    parse_rate_limits,
)
from gateway.keys.budget_periods import NEVER, PeriodClock, fixed_window
from gateway.redis.keys import DEFAULT_PREFIX, RedisKeys

KEY_PREFIX = "sk-cascade-"

# ---- operations (plain functions over a sync Redis client; the commands below wrap them) ----


def add_key(
    client: Any,
    name: str,
    limit_usd: float | None,
    keys: RedisKeys,
    *,
    rate_limits: Sequence[RateLimit | dict[str, Any]] | None = None,
    period: BudgetPeriod | None = None,
) -> tuple[str, str]:
    """Create a client key named ``name``; store only its hash. Returns (key, key_id).

    ``rate_limits``: the key's own (``[]``: none at all); None: the config's default. ``period``:
    its budget period; None: the config's default (else the fixed window)."""
    from gateway.keys.auth import hash_key, key_id_of

    if any(record.get("name") == name for record in _records(client, keys).values()):
        raise CliError(f"a key named {name!r} already exists (revoke it first, or pick another name)")
    key = KEY_PREFIX + secrets.token_urlsafe(32)
    key_hash = hash_key(key)
    created_at = datetime.now(UTC).isoformat(timespec="seconds")
    record: dict[str, Any] = {"name": name, "limit_usd": limit_usd, "created_at": created_at}
    if rate_limits is not None:
        limits = [RateLimit.model_validate(limit) for limit in rate_limits]
        record["rate_limits"] = [limit.model_dump(exclude_none=True) for limit in limits]
    if period is not None:
        record["budget_period"] = period.model_dump(exclude_none=True)
    client.hset(keys.client_keys, key_hash, json.dumps(record))
    return key, key_id_of(key_hash)


def list_keys(
    client: Any, keys: RedisKeys, *, window_s: int = 86400, now: float | None = None
) -> list[dict[str, Any]]:
    """Every stored key as {key_id, name, limit_usd, created_at, rate_limits, budget_period,
    window_start, window_end, spent_usd} (never the key or its full hash). The spend is of the key's
    current window: its budget period's, else the fixed ``window_s`` window (the config's
    ``budgets.window_s``); ``rate_limits``/``budget_period`` None: the config's defaults apply."""
    from gateway.keys.auth import key_id_of

    now = time.time() if now is None else now
    rows = []
    for key_hash, record in sorted(_records(client, keys).items(), key=lambda item: str(item[1].get("name"))):
        key_id = key_id_of(key_hash)
        row = {
            "key_id": key_id,
            **{k: record.get(k) for k in ("name", "limit_usd", "created_at")},
        }
        limits = parse_rate_limits(record.get("rate_limits"))
        period = parse_period(record.get("budget_period"))
        window = PeriodClock().window(period, now) if period is not None else fixed_window(now, window_s)
        counter = client.get(keys.spend(key_id, window.start))
        row.update(
            rate_limits=[limit.model_dump(exclude_none=True) for limit in limits]
            if limits is not None
            else None,
            budget_period=period.model_dump(exclude_none=True) if period is not None else None,
            window_start=window.start,
            window_end=window.end if window.end < NEVER else None,
            spent_usd=int(counter or 0) / 1e9,
        )
        rows.append(row)
    return rows


def revoke_key(client: Any, name_or_id: str, keys: RedisKeys) -> str:
    """Delete the key with this name or key_id; returns its key_id."""
    from gateway.keys.auth import key_id_of

    matches = [h for h, r in _records(client, keys).items() if name_or_id in (r.get("name"), key_id_of(h))]
    if not matches:
        raise CliError(f"no key named or with id {name_or_id!r}")
    if len(matches) > 1:
        raise CliError(f"{name_or_id!r} matches {len(matches)} keys; use the key_id")
    client.hdel(keys.client_keys, matches[0])
    return key_id_of(matches[0])


def _rate_limits(
    rpm: int | None, tpm: int | None, specs: Sequence[str], none: bool
) -> list[RateLimit] | None:
    """The key's rate limits from the options; None when none is given (the config's default)."""
    limits = []
    if rpm is not None or tpm is not None:
        limits.append(RateLimit(window_s=60, requests=rpm, tokens=tpm))
    try:
        limits += [parse_rate_limit_spec(spec) for spec in specs]
    except ValueError as exc:
        raise CliError(f"--rate-limit {exc}") from None
    if none and limits:
        raise CliError("--no-rate-limits contradicts --rpm/--tpm/--rate-limit")
    return [] if none else (limits or None)


def _period(kind: str | None, timezone: str, rollover_cap_usd: float | None) -> BudgetPeriod | None:
    if kind is None:
        if rollover_cap_usd is not None:
            raise CliError("--rollover-cap-usd needs --period daily, weekly or monthly")
        return None
    try:
        return BudgetPeriod.model_validate(
            {"kind": kind, "timezone": timezone, "rollover_cap_usd": rollover_cap_usd}
        )
    except ValidationError as exc:
        raise CliError(f"--period: {exc.errors()[0]['msg']}") from None


def _describe_rate(limit: dict[str, Any]) -> str:
    parts = [f"{limit[k]} {k}" for k in ("requests", "tokens") if limit.get(k) is not None]
    return f"{' + '.join(parts)} / {limit['window_s']}s"


def _records(client: Any, keys: RedisKeys) -> dict[str, dict[str, Any]]:
    records = {}
    for key_hash, raw in client.hgetall(keys.client_keys).items():
        try:
            record = json.loads(raw)
        except ValueError:
            record = {}
        records[key_hash] = record if isinstance(record, dict) else {}
    return records


# ---- commands ----


keys_app = typer.Typer(help="Client API keys stored (hashed) in Redis.", no_args_is_help=True)


@keys_app.command("add")
def keys_add(
    name: Annotated[str, typer.Argument(help="a label for the key (client or team name)")],
    redis_url: RedisOption,
    limit_usd: Annotated[
        float | None, typer.Option("--limit-usd", min=0, help="spend limit per budget window or period (USD)")
    ] = None,
    rpm: Annotated[int | None, typer.Option("--rpm", min=0, help="requests per minute")] = None,
    tpm: Annotated[int | None, typer.Option("--tpm", min=0, help="tokens per minute")] = None,
    rate_limit: Annotated[
        list[str] | None,
        typer.Option(
            "--rate-limit",
            help="WINDOW:requests=N,tokens=M (WINDOW e.g. 1s, 1m, 1h, 1d), repeatable: several windows",
        ),
    ] = None,
    no_rate_limits: Annotated[
        bool, typer.Option("--no-rate-limits", help="no rate limit at all, whatever the config's default")
    ] = False,
    period: Annotated[
        str | None, typer.Option("--period", help="budget period: none, daily, weekly or monthly")
    ] = None,
    timezone: Annotated[str, typer.Option("--timezone", help="IANA time zone of the period")] = "UTC",
    rollover_cap_usd: Annotated[
        float | None,
        typer.Option(
            "--rollover-cap-usd", min=0, help="carry unused budget into the next period, up to this"
        ),
    ] = None,
    prefix: PrefixOption = DEFAULT_PREFIX,
) -> None:
    """Create a client key; it is printed once and only its SHA-256 is stored."""

    def create() -> tuple[str, str]:
        limits = _rate_limits(rpm, tpm, rate_limit or [], no_rate_limits)
        budget = _period(period, timezone, rollover_cap_usd)
        return add_key(
            connect(redis_url), name, limit_usd, RedisKeys(prefix), rate_limits=limits, period=budget
        )

    key, key_id = run_command(create)
    typer.echo(key)
    limit = f"limit ${limit_usd:g}" if limit_usd is not None else "the config's default limit"
    if period is not None:
        limit += f" per {period} period ({timezone})" if period != "none" else " (never resets)"
    typer.secho(f"key {name!r} (key_id {key_id}, {limit}); store it now, it cannot be shown again", err=True)


@keys_app.command("list")
def keys_list(
    redis_url: RedisOption,
    window_s: Annotated[
        int, typer.Option("--window-s", min=1, help="the config's budgets.window_s (keys without a period)")
    ] = 86400,
    as_json: Annotated[bool, typer.Option("--json", help="one JSON object per key")] = False,
    prefix: PrefixOption = DEFAULT_PREFIX,
) -> None:
    """List stored keys by name and key_id (the keys themselves are not stored), with their limits,
    budget period and spend in the current window or period."""
    rows = run_command(lambda: list_keys(connect(redis_url), RedisKeys(prefix), window_s=window_s))
    for row in rows:
        if as_json:
            typer.echo(json.dumps(row))
            continue
        limit = "default" if row["limit_usd"] is None else f"${row['limit_usd']:g}"
        period = row["budget_period"]
        if period is None:
            where = f"window={window_s}s (or the config's period)"
        else:
            where = "period=" + BudgetPeriod.model_validate(period).describe()
        rates = row["rate_limits"]
        rate = "default" if rates is None else (", ".join(_describe_rate(r) for r in rates) or "none")
        typer.echo(
            f"{row['key_id']}  {row['name']}  limit={limit}  {where}  spent=${row['spent_usd']:.6f}  "
            f"rate={rate}  created={row['created_at']}"
        )


@keys_app.command("revoke")
def keys_revoke(
    name_or_id: Annotated[str, typer.Argument(help="the key's name or key_id")],
    redis_url: RedisOption,
    prefix: PrefixOption = DEFAULT_PREFIX,
) -> None:
    """Delete a key (replicas stop accepting it within their 5 s cache)."""
    key_id = run_command(lambda: revoke_key(connect(redis_url), name_or_id, RedisKeys(prefix)))
    typer.echo(f"revoked {key_id}")


def register(app: typer.Typer) -> None:
    """Mount ``cascade keys`` on the root app."""
    app.add_typer(keys_app, name="keys")
