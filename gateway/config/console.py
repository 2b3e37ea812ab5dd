"""The ``console:`` section of the gateway config (docs/contracts.md#config and #console).

Off by default: with ``enabled: false`` the gateway records nothing and serves no ``/console`` page,
and a request pays one branch on a flag set at start (gateway.api.endpoint).
"""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict, Field


class ConsoleConfig(BaseModel):
    """The operator console: a decision record of every request and the pages that read them."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    enabled: bool = Field(False, description="record every request and serve the /console pages")
    max_records: int = Field(
        100_000,
        ge=100,
        le=10_000_000,
        description="records kept (the newest; a capped Redis stream shared by every replica, or an "
        "in-process ring without Redis)",
    )
    record_bodies: bool = Field(
        False,
        description="also keep the client's request body and the answer sent (redacted, cut at "
        "body_chars); off: no text of a request or an answer is recorded",
    )
    body_chars: int = Field(8192, ge=256, le=1_048_576, description="longest body kept, characters")
