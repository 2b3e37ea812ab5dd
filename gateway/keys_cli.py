"""``cascade keys add|list|revoke``: the client API keys a Redis-backed fleet accepts.

Client keys are printed once at creation; Redis stores only their SHA-256. Replicas see a new or
revoked key within their key cache's lifetime (gateway.auth).
"""

from __future__ import annotations

import json
import secrets
from datetime import UTC, datetime
from typing import Annotated, Any

import typer

from gateway.redis_cli import CliError, PrefixOption, RedisOption, connect, run_command
from gateway.redis_keys import DEFAULT_PREFIX, RedisKeys

KEY_PREFIX = "sk-cascade-"

# ---- operations (plain functions over a sync Redis client; the commands below wrap them) ----


def add_key(client: Any, name: str, limit_usd: float | None, keys: RedisKeys) -> tuple[str, str]:
    """Create a client key named ``name``; store only its hash. Returns (key, key_id)."""
    from gateway.auth import hash_key, key_id_of

    if any(record.get("name") == name for record in _records(client, keys).values()):
        raise CliError(f"a key named {name!r} already exists (revoke it first, or pick another name)")
    key = KEY_PREFIX + secrets.token_urlsafe(32)
    key_hash = hash_key(key)
    created_at = datetime.now(UTC).isoformat(timespec="seconds")
    record = {"name": name, "limit_usd": limit_usd, "created_at": created_at}
    client.hset(keys.client_keys, key_hash, json.dumps(record))
    return key, key_id_of(key_hash)


def list_keys(client: Any, keys: RedisKeys) -> list[dict[str, Any]]:
    """Every stored key as {key_id, name, limit_usd, created_at} (never the key or its full hash)."""
    from gateway.auth import key_id_of

    return [
        {"key_id": key_id_of(h), **{k: r.get(k) for k in ("name", "limit_usd", "created_at")}}
        for h, r in sorted(_records(client, keys).items(), key=lambda item: str(item[1].get("name")))
    ]


def revoke_key(client: Any, name_or_id: str, keys: RedisKeys) -> str:
    """Delete the key with this name or key_id; returns its key_id."""
    from gateway.auth import key_id_of

    matches = [h for h, r in _records(client, keys).items() if name_or_id in (r.get("name"), key_id_of(h))]
    if not matches:
        raise CliError(f"no key named or with id {name_or_id!r}")
    if len(matches) > 1:
        raise CliError(f"{name_or_id!r} matches {len(matches)} keys; use the key_id")
    client.hdel(keys.client_keys, matches[0])
    return key_id_of(matches[0])


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
        float | None, typer.Option("--limit-usd", min=0, help="spend limit per budget window (USD)")
    ] = None,
    prefix: PrefixOption = DEFAULT_PREFIX,
) -> None:
    """Create a client key; it is printed once and only its SHA-256 is stored."""
    key, key_id = run_command(lambda: add_key(connect(redis_url), name, limit_usd, RedisKeys(prefix)))
    typer.echo(key)
    limit = f"limit ${limit_usd:g} per window" if limit_usd is not None else "the config's default limit"
    typer.secho(f"key {name!r} (key_id {key_id}, {limit}); store it now, it cannot be shown again", err=True)


@keys_app.command("list")
def keys_list(redis_url: RedisOption, prefix: PrefixOption = DEFAULT_PREFIX) -> None:
    """List stored keys by name and key_id (the keys themselves are not stored)."""
    rows = run_command(lambda: list_keys(connect(redis_url), RedisKeys(prefix)))
    for row in rows:
        limit = "default" if row["limit_usd"] is None else f"${row['limit_usd']:g}"
        typer.echo(f"{row['key_id']}  {row['name']}  limit={limit}  created={row['created_at']}")


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
