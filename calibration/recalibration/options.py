"""The options of ``cascade recalibrate`` (``calibration.commands.recalibrate_cli``), shared by its steps."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

from calibration.recalibration.rule import Tolerances
from publishing import DEFAULT_PREFIX


@dataclass(frozen=True)
class RecalibrateOptions:
    """The command's arguments (see ``cascade recalibrate --help``)."""

    store: str
    tiers: Path
    since: str | None = None
    where: dict[str, str] = field(default_factory=dict)
    models: list[str] | None = None
    current: Path | None = None
    push: str | None = None
    prefix: str = DEFAULT_PREFIX
    seed: int = 0
    holdout: float = 0.5
    prices: Path | None = None
    scorer: str | None = None
    top_k: int | None = None
    randomize: bool = False
    resamples: int = 2000
    confidence: float = 0.95
    tolerances: Tolerances = field(default_factory=Tolerances)
    min_queries: int = 100
    heldout_splits: int = 50  # 0: no held-out expectations in the new policy
    # The router (calibration.recalibration.router_refit): None = the current policy's mechanisms.
    mechanisms: tuple[str, ...] | None = None
    features: str | None = None  # a new router's feature set (default cheap-v1)
    router_components: int | None = None  # default: the current router's, else 16
