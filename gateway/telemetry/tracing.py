"""OpenTelemetry traces of requests and their upstream attempts (docs/operations.md#tracing).

Off by default. On with the config's ``tracing`` section or, when ``tracing.enabled`` is unset,
the standard ``OTEL_EXPORTER_OTLP_ENDPOINT`` / ``OTEL_EXPORTER_OTLP_TRACES_ENDPOINT`` variables.
This module imports no opentelemetry: ``build_tracing`` imports it (gateway.telemetry.otel_spans)
only when tracing is on, so a gateway without tracing pays neither its import nor its calls.

The request path sees one observer, the request's trace in ``REQUEST_TRACE`` (None when off;
gateway.telemetry.trace_context): the endpoint sets it with the request's SERVER span, the upstream
client opens one CLIENT span per attempt under it, the stage decision adds each scored stage's score.
"""

from __future__ import annotations

import os
from typing import TYPE_CHECKING

from gateway.config.settings import ConfigError, TracingConfig

if TYPE_CHECKING:
    from gateway.telemetry.otel_spans import Tracing
    from redaction import Redactor

_ENDPOINT_VARIABLES = ("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT", "OTEL_EXPORTER_OTLP_ENDPOINT")


def tracing_enabled(config: TracingConfig, environ: dict[str, str] | None = None) -> bool:
    """Whether the gateway traces: the config's ``enabled`` when set, else whether an OTLP endpoint
    variable is set (and neither ``OTEL_SDK_DISABLED=true`` nor ``OTEL_TRACES_EXPORTER=none``)."""
    env = os.environ if environ is None else environ
    if config.enabled is not None:
        return config.enabled
    if env.get("OTEL_SDK_DISABLED", "").strip().lower() == "true":
        return False
    if env.get("OTEL_TRACES_EXPORTER", "").strip().lower() == "none":
        return False
    return config.endpoint is not None or any(env.get(name) for name in _ENDPOINT_VARIABLES)


def build_tracing(config: TracingConfig, redact: Redactor) -> Tracing | None:
    """The gateway's tracing (an OTLP/HTTP exporter behind a batch processor), None when off.

    ``redact`` cleans captured content of every configured secret (only with
    ``capture_content``). Raises ConfigError without the ``tracing`` extra, ValueError for an OTLP
    protocol other than ``http/protobuf``."""
    if not tracing_enabled(config):
        return None
    try:
        from gateway.telemetry.otel_spans import Tracing  # the SDK is imported only when tracing is on
    except ImportError as exc:
        need = "pip install 'cascade-gateway[tracing]'"
        raise ConfigError(f"tracing is on but the tracing extra is not installed: {need}") from exc
    return Tracing.exporting(config, redact)
