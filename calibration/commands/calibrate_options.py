"""The arguments of ``cascade calibrate`` as one value (``calibration.commands.calibrate_cli``)."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path


@dataclass(frozen=True)
class CalibrateOptions:
    """The command's arguments (see ``calibrate``)."""

    runs: Path
    tiers: Path
    output: Path
    prices: Path | None = None
    score_column: str | None = None
    scorer: str | None = None
    top_k: int | None = None
    equivalence: str | None = None
    samples: int | None = None
    score_tokens: str = "all"  # ScorerSpec.tokens
    where: list[str] = field(default_factory=list)
    report: Path | None = None
    randomize: bool = False
    heldout_splits: int = 50  # 0: no held-out expectations
    confidence: float | None = 0.95  # the tiers' bounds (calibration.bounds); None: no bounds
    mechanisms: tuple[str, ...] = ("cascade",)
    prompts: list[Path] = field(default_factory=list)
    features: str = "cheap-v1"
    router_components: int = 16
    commit_grid: str | None = None  # prefix rules to study per tier (calibration.policy.commit_choice)
    min_gain_share: float = 0.8
    benefit_scorer: bool = False  # calibration.policy.benefit_choice
