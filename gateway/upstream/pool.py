"""All configured upstreams: one ``UpstreamClient`` per configured model, by its name."""

from __future__ import annotations

import asyncio
from collections.abc import Mapping

from gateway.config.settings import ModelConfig
from gateway.telemetry.metrics import GatewayMetrics
from gateway.upstream.breaker import Breakers
from gateway.upstream.breaker_share import SharedBreakers
from gateway.upstream.client import UpstreamClient
from gateway.upstream.transport import SessionOpener, open_pooled_session
from redaction import Redactor, url_secrets


class UpstreamPool:
    """All configured upstreams, by configured model name."""

    def __init__(
        self,
        models: Mapping[str, ModelConfig],
        metrics: GatewayMetrics,
        redact: Redactor | None = None,
        transport: SessionOpener = open_pooled_session,
        breakers: Breakers | None = None,
        share: SharedBreakers | None = None,
    ):
        """``redact``: the gateway's (every configured secret); by default the models' own keys and
        URL passwords. ``transport`` opens each client's session (gateway.upstream.transport).
        ``breakers``: the models' circuit breakers (None: calls are never skipped), shared through
        Redis by ``share`` when given."""
        redact = redact or Redactor(
            secret for cfg in models.values() for secret in [cfg.api_key(), *url_secrets(cfg.base_url)]
        )
        circuits = breakers.by_model if breakers is not None else {}
        self.clients = {
            name: UpstreamClient(name, cfg, metrics, redact, transport, circuits.get(name), share)
            for name, cfg in models.items()
        }

    async def start(self) -> None:
        """Open every session (inside the app lifespan, never at import)."""
        for client in self.clients.values():
            await client.start()

    async def close(self) -> None:
        """Close every session."""
        await asyncio.gather(*(client.close() for client in self.clients.values()), return_exceptions=True)

    def __getitem__(self, name: str) -> UpstreamClient:
        return self.clients[name]
