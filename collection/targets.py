"""Where ``cascade collect`` sends prompts: models of a gateway config, or the local pool."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from money import Price
from policies.request_defaults import RequestDefaults


class TargetError(Exception):
    """Unknown model or unreadable config; one-line message."""


@dataclass(frozen=True)
class Target:
    """One OpenAI-compatible model endpoint and its price."""

    name: str
    base_url: str
    model: str
    price: Price
    api_key: str | None = None
    timeout_s: float = 120.0
    request_defaults: RequestDefaults | None = None


def targets_from_config(config: Path, names: list[str] | None) -> list[Target]:
    """Models of a gateway.yaml: base URL, upstream id, key by env reference, price.

    The config is described in docs/contracts.md#config.
    """
    from gateway.config.settings import ConfigError, Settings

    try:
        settings = Settings.from_yaml(config)
    except ConfigError as exc:
        raise TargetError(str(exc)) from exc
    chosen = _choose(list(settings.models), names, str(config))
    targets = []
    for name in chosen:
        model = settings.models[name]
        targets.append(
            Target(
                name=name,
                base_url=model.base_url,
                model=model.model,
                price=model.price,
                api_key=model.api_key(),
                timeout_s=model.timeout_s,
                request_defaults=model.request_defaults,
            )
        )
    return targets


def targets_from_pool(names: list[str] | None) -> list[Target]:
    """Models and members of the local pool (manifest ports, prices, request defaults).

    A member is sent to its model's server with the member's request defaults. Without names, the
    default models. The servers must be up.
    """
    from localpool.manifest import load_manifest
    from localpool.pool import base_url

    manifest = load_manifest()
    chosen = _choose([*manifest.models, *manifest.members], names, "the local pool")
    if not names:
        chosen = [n for n in manifest.models if manifest.models[n].default]
    targets = []
    for name in chosen:
        member = manifest.members.get(name)
        server = member.server if member else name
        spec = manifest.models[server]
        targets.append(
            Target(
                name=name,
                base_url=base_url(spec),
                model=server,
                price=spec.price,
                request_defaults=member.request_defaults if member else None,
            )
        )
    return targets


def _choose(available: list[str], names: list[str] | None, where: str) -> list[str]:
    if not names:
        return available
    unknown = [n for n in names if n not in available]
    if unknown:
        raise TargetError(f"unknown model {', '.join(unknown)} in {where}; known: {', '.join(available)}")
    return names
