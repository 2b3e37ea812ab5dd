"""``cascade policy push|show`` and ``cascade keys add|list|revoke``: operate a Redis-backed fleet.

A pushed policy reaches every replica within about a second (pub/sub, with a version check as a
safety net). Client keys are printed once at creation; Redis stores only their SHA-256.
"""

from __future__ import annotations

import json
import secrets
from collections.abc import Collection
from datetime import UTC, datetime
from pathlib import Path
from typing import Annotated, Any

import typer

from cli_failure import fail
from gateway.redis_keys import DEFAULT_PREFIX, PREFIX_ENV, RedisKeys
from policies.redaction import redact_url

RedisOption = Annotated[
    str,
    typer.Option("--redis", envvar="CASCADE_REDIS_URL", help="Redis URL, e.g. redis://127.0.0.1:6379/0"),
]
PrefixOption = Annotated[
    str,
    typer.Option("--prefix", envvar=PREFIX_ENV, hidden=True, help="Key prefix (default: cascade)."),
]

KEY_PREFIX = "sk-cascade-"


class CliError(Exception):
    """A one-line error for the user."""


# ---- operations (plain functions over a sync Redis client; the commands below wrap them) ----


def push_policy(
    client: Any, policy_path: Path, keys: RedisKeys, known_models: Collection[str] | None = None
) -> tuple[str, int]:
    """Validate a policy file, store it as current, bump the version, notify replicas.

    Returns (policy_id, version). ``known_models`` (the gateway config's model names): a policy
    routing to any other model is refused, nothing is stored; None skips that check. The push is
    ``policies.publish.push_policy``: SET and INCR in one MULTI/EXEC transaction so a reader never
    pairs a new version with an old policy, then PUBLISH.
    """
    from policies import PolicyError, load_policy
    from policies.publish import push_policy as publish

    try:
        policy = load_policy(policy_path)
        version = publish(client, policy, keys, known_models=known_models)
    except PolicyError as exc:
        raise CliError(str(exc)) from exc
    return policy.policy_id, version


def configured_models(config_path: Path) -> list[str]:
    """The model names of a gateway config (what replicas can route to); CliError if it is bad."""
    from gateway.config import ConfigError, Settings

    try:
        return list(Settings.from_yaml(config_path).models)
    except ConfigError as exc:
        raise CliError(str(exc)) from exc


def read_policy(client: Any, keys: RedisKeys) -> tuple[dict[str, Any], int | None]:
    """The current policy document and version stored in Redis; CliError if none."""
    raw, version = client.mget(keys.policy_current, keys.policy_version)
    if raw is None:
        raise CliError(f"no policy at {keys.policy_current}: push one with `cascade policy push`")
    return json.loads(raw), int(version) if version is not None else None


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


def _connect(url: str) -> Any:
    import redis

    client = redis.Redis.from_url(url, decode_responses=True, socket_connect_timeout=3, socket_timeout=5)
    try:
        client.ping()
    except (redis.RedisError, OSError) as exc:
        raise CliError(f"cannot reach Redis at {redact_url(url)}: {exc}") from exc
    return client


def _run(action: Any) -> Any:
    """Run an operation, turning CliError and Redis errors into one red line and exit 1."""
    import redis

    try:
        return action()
    except CliError as exc:
        fail(str(exc))
    except (redis.RedisError, OSError) as exc:
        fail(f"redis: {exc}")
    except (typer.Exit, typer.Abort):
        raise
    except Exception as exc:  # never a traceback for an operator's command: one line, exit 1
        fail(f"unexpected {type(exc).__name__}: {' '.join(str(exc).split())[:300]}")


policy_app = typer.Typer(help="Push and inspect the policy served from Redis.", no_args_is_help=True)
keys_app = typer.Typer(help="Client API keys stored (hashed) in Redis.", no_args_is_help=True)


@policy_app.command("push")
def policy_push(
    policy_path: Annotated[Path, typer.Argument(metavar="POLICY.json", help="policy file to serve")],
    redis_url: RedisOption,
    config: Annotated[
        Path | None,
        typer.Option(
            "--config",
            "-c",
            help="the replicas' gateway YAML: refuse a policy routing to a model it does not define",
        ),
    ] = None,
    prefix: PrefixOption = DEFAULT_PREFIX,
) -> None:
    """Validate POLICY.json and make it the policy every replica serves (within about a second)."""
    keys = RedisKeys(prefix)
    known_models = None if config is None else _run(lambda: configured_models(config))
    policy_id, version = _run(lambda: push_policy(_connect(redis_url), policy_path, keys, known_models))
    if config is None:
        typer.secho(
            "warning: the models this policy routes to were not checked against a gateway config "
            "(pass --config gateway.yaml); replicas refuse a policy routing to a model they lack",
            err=True,
            fg=typer.colors.YELLOW,
        )
    typer.echo(policy_id)
    typer.secho(f"pushed as version {version} to {keys.policy_current}", err=True)


@policy_app.command("show")
def policy_show(
    redis_url: RedisOption,
    prefix: PrefixOption = DEFAULT_PREFIX,
    as_json: Annotated[bool, typer.Option("--json", help="print the whole policy JSON")] = False,
) -> None:
    """Show the policy stored in Redis: id, version, tiers (or the whole JSON with --json)."""
    document, version = _run(lambda: read_policy(_connect(redis_url), RedisKeys(prefix)))
    if as_json:
        typer.echo(json.dumps(document, indent=2))
        return
    typer.echo(f"policy_id   {document.get('policy_id')}")
    typer.echo(f"version     {version}")
    typer.echo(f"created_at  {document.get('created_at')}")
    typer.echo(f"scorer      {document.get('scorer', {}).get('name')}")
    typer.echo(f"default     {document.get('default_tier')}")
    for name, tier in document.get("tiers", {}).items():
        routes = " | ".join(
            f"{r.get('weight', 1):g}x "
            + " -> ".join(r["models"])
            + (f" @ {', '.join(f'{t:.4g}' for t in r.get('thresholds', []))}" if r.get("thresholds") else "")
            for r in tier.get("routes", [])
        )
        expected = tier.get("expected", {})
        typer.echo(
            f"tier {name}: {routes}  (expected cost ${expected.get('cost_usd', 0):.6g}, "
            f"quality {expected.get('quality', 0):.3f}, escalation {expected.get('escalation_rate', 0):.1%})"
        )


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
    key, key_id = _run(lambda: add_key(_connect(redis_url), name, limit_usd, RedisKeys(prefix)))
    typer.echo(key)
    limit = f"limit ${limit_usd:g} per window" if limit_usd is not None else "the config's default limit"
    typer.secho(f"key {name!r} (key_id {key_id}, {limit}); store it now, it cannot be shown again", err=True)


@keys_app.command("list")
def keys_list(redis_url: RedisOption, prefix: PrefixOption = DEFAULT_PREFIX) -> None:
    """List stored keys by name and key_id (the keys themselves are not stored)."""
    rows = _run(lambda: list_keys(_connect(redis_url), RedisKeys(prefix)))
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
    key_id = _run(lambda: revoke_key(_connect(redis_url), name_or_id, RedisKeys(prefix)))
    typer.echo(f"revoked {key_id}")


def register(app: typer.Typer) -> None:
    """Mount ``cascade policy`` and ``cascade keys`` on the root app."""
    app.add_typer(policy_app, name="policy")
    app.add_typer(keys_app, name="keys")
