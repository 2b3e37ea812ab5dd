"""``cascade policy push|show``: the policy a Redis-backed fleet serves.

A pushed policy reaches every replica within about a second (pub/sub, with a version check as a
safety net). The push is ``publishing.push_policy``, the one ``cascade recalibrate`` uses.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Annotated, Any

import typer

from gateway.commands.redis_options import CliError, PrefixOption, RedisOption, connect, run_command
from gateway.redis.keys import DEFAULT_PREFIX, RedisKeys
from policies import load_policy
from policies.capabilities import ModelCapabilities
from publishing import push_policy

# ---- operations (plain functions over a sync Redis client; the commands below wrap them) ----


def configured_models(config_path: Path) -> dict[str, ModelCapabilities]:
    """The models of a gateway config (what replicas can route to) and their declared capabilities
    (what a scorer can get from each); CliError if the config is bad."""
    from gateway.config.settings import ConfigError, Settings

    try:
        return Settings.from_yaml(config_path).model_capabilities()
    except ConfigError as exc:
        raise CliError(str(exc)) from exc


def read_policy(client: Any, keys: RedisKeys) -> tuple[dict[str, Any], int | None]:
    """The current policy document and version stored in Redis; CliError if none."""
    raw, version = client.mget(keys.policy_current, keys.policy_version)
    if raw is None:
        raise CliError(f"no policy at {keys.policy_current}: push one with `cascade policy push`")
    return json.loads(raw), int(version) if version is not None else None


# ---- commands ----


policy_app = typer.Typer(help="Push and inspect the policy served from Redis.", no_args_is_help=True)


@policy_app.command("push")
def policy_push(
    policy_path: Annotated[Path, typer.Argument(metavar="POLICY.json", help="policy file to serve")],
    redis_url: RedisOption,
    config: Annotated[
        Path | None,
        typer.Option(
            "--config",
            "-c",
            help="the replicas' gateway YAML: refuse a policy routing to a model it does not define, "
            "or whose scorer needs more than a model's declared capabilities give",
        ),
    ] = None,
    prefix: PrefixOption = DEFAULT_PREFIX,
) -> None:
    """Validate POLICY.json and make it the policy every replica serves (within about a second)."""
    keys = RedisKeys(prefix)
    known_models = None if config is None else run_command(lambda: configured_models(config))
    client = run_command(lambda: connect(redis_url))

    def push() -> tuple[str, int]:
        policy = load_policy(policy_path)
        version = push_policy(client, policy, keys, known_models=known_models, capabilities=known_models)
        return policy.policy_id, version

    policy_id, version = run_command(push)
    if config is None:
        typer.secho(
            "warning: the models this policy routes to and their capabilities were not checked against "
            "a gateway config (pass --config gateway.yaml); replicas refuse a policy routing to a model "
            "they lack or scoring one that cannot give what its scorer reads",
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
    document, version = run_command(lambda: read_policy(connect(redis_url), RedisKeys(prefix)))
    if as_json:
        typer.echo(json.dumps(document, indent=2))
        return
    typer.echo(f"policy_id   {document.get('policy_id')}")
    typer.echo(f"version     {version}")
    typer.echo(f"created_at  {document.get('created_at')}")
    typer.echo(f"scorer      {document.get('scorer', {}).get('name')}")
    typer.echo(f"default     {document.get('default_tier')}")
    for line in tier_lines(document.get("tiers", {})):
        typer.echo(line)
    for kind, section in (document.get("kinds") or {}).items():
        scorer = (section.get("scorer") or document.get("scorer") or {}).get("name")
        typer.echo(f"kind {kind} (scorer {scorer}):")
        for line in tier_lines(section.get("tiers", {})):
            typer.echo(f"  {line}")


def tier_lines(tiers: dict[str, Any]) -> list[str]:
    """One line per tier: its routes (``(fallback)`` for a fallback tier) and what it expects
    (in-sample, then held out when present)."""
    lines = []
    for name, tier in tiers.items():
        routes = " | ".join(
            f"{r.get('weight', 1):g}x "
            + " -> ".join(r["models"])
            + (f" @ {', '.join(f'{t:.4g}' for t in r.get('thresholds', []))}" if r.get("thresholds") else "")
            for r in tier.get("routes", [])
        )
        if tier.get("mechanism") == "fallback":  # unscored: the next model only when a call fails
            routes += " (fallback)"
        expected = tier.get("expected", {})
        line = (
            f"tier {name}: {routes}  (expected cost ${expected.get('cost_usd', 0):.6g}, "
            f"quality {expected.get('quality', 0):.3f}, escalation {expected.get('escalation_rate', 0):.1%})"
        )
        heldout = expected.get("heldout")
        if heldout:
            quality = heldout["quality"]
            line += (
                f"  held out over {heldout['splits']} splits: cost ${heldout['cost_usd']['mean']:.6g}, "
                f"quality {quality['mean']:.3f} [{quality['low']:.3f}, {quality['high']:.3f}], "
                f"escalation {heldout['escalation_rate']['mean']:.1%}"
            )
        lines.append(line)
    return lines


def register(app: typer.Typer) -> None:
    """Mount ``cascade policy`` on the root app."""
    app.add_typer(policy_app, name="policy")
