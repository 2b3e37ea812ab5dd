"""Commands of this package, mounted on the root ``cascade`` app."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer

from cli_failure import fail
from gateway.commands.keys import register as register_keys
from gateway.commands.policy import register as register_policy
from redaction import redact_url

if TYPE_CHECKING:
    from gateway.config.settings import Settings

# `cascade serve` exits 2 on a config it cannot start with (README, "Serve").
_CONFIG_ERROR = 2


def register(app: typer.Typer) -> None:
    """Add this package's commands to the root app."""
    app.command("serve")(serve)
    register_policy(app)  # `cascade policy push|show`
    register_keys(app)  # `cascade keys add|list|revoke`


def serve(
    config: Annotated[
        Path, typer.Option("--config", "-c", help="gateway YAML config (docs/contracts.md#config)")
    ],
    host: Annotated[str, typer.Option("--host", help="interface to listen on")] = "127.0.0.1",
    port: Annotated[int, typer.Option("--port", "-p", min=1, max=65535, help="TCP port to listen on")] = 8000,
) -> None:
    """Serve the OpenAI-compatible cascade gateway (one process, uvloop + httptools, JSON-lines logs)."""
    from gateway.config.settings import ConfigError, Settings

    try:
        settings = Settings.from_yaml(config)
    except ConfigError as exc:
        fail(str(exc), code=_CONFIG_ERROR)
    from gateway.config.learning import missing_requirement

    problem = missing_requirement(settings.learning)  # the store's or judge's extra, when learning is on
    if problem is not None:
        fail(f"{config}: learning: {problem}", code=_CONFIG_ERROR)
    if not settings.policy_is_redis and not Path(settings.policy).is_file():
        fail(
            f"{config}: policy file {settings.policy} does not exist (write one with `cascade calibrate`)",
            code=_CONFIG_ERROR,
        )
    problem = unscorable_policy(settings)
    if problem is not None:
        fail(f"{config}: {problem}", code=_CONFIG_ERROR)

    from gateway.api.server import run
    from gateway.wire.logs import configure_logging, log_event

    configure_logging(settings.logging.level)
    problem = probed_disagreement(settings)
    if problem is not None:
        fail(f"{config}: {problem}", code=_CONFIG_ERROR)
    log_event(
        "serving",
        url=f"http://{host}:{port}/v1",
        config=str(config),
        policy=settings.policy if not settings.policy_is_redis else redact_url(settings.policy),
    )
    run(settings, host, port)


def unscorable_policy(settings: Settings) -> str | None:
    """Why the config's policy file cannot be scored with these models (one line), or None.

    A scorer needing more than a scored model's declared capabilities give would leave that stage
    without a score on every request: ``cascade serve`` refuses to start with such a policy file.
    A policy file that does not load is left to the policy store (the replica starts, not ready,
    and reports why); a Redis policy is checked by the store when it is read, and refused there.
    """
    if settings.policy_is_redis:
        return None
    from policies import PolicyError, load_policy
    from publishing import check_capabilities

    try:
        policy = load_policy(settings.policy)
    except PolicyError:
        return None
    try:
        check_capabilities(policy, settings.model_capabilities())
    except PolicyError as exc:
        return str(exc)
    return None


def probed_disagreement(settings: Settings) -> str | None:
    """With ``probe_capabilities``: the first model that is unreachable or disagrees with its
    declared capabilities after one call each (``gateway.upstream.models_check``), on one line; else None.

    What the probe calls cost is logged (``capabilities_probed``): nothing spent goes unrecorded.
    """
    if not settings.probe_capabilities:
        return None
    from gateway.upstream.models_check import problems, run_checks
    from gateway.wire.logs import log_event

    reports = run_checks(settings)
    found = problems(reports)
    log_event(
        "capabilities_probed",
        models=len(reports),
        agree=not found,
        cost_usd=sum(r.cost_usd for r in reports),
        disagreements=found,
    )
    if not found:
        return None
    more = f" (+{len(found) - 1} more)" if len(found) > 1 else ""
    return f"probe_capabilities: {found[0]}{more}; see `cascade models check`"
