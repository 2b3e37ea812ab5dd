"""Traffic for ``cascade recalibrate`` tests: synthetic judge-labelled rows, real stores, real Redis."""

from __future__ import annotations

from pathlib import Path

from calibration.calibrate import calibrate
from calibration.runs import load_runs
from calibration.tiers import parse_tiers
from policies import save_policy
from policies.schema import Policy
from tests.support.traffic_kinds import TEXT_AGREEMENT, TIERS, Labeller, kind_traffic
from traffic.export import write_runs
from traffic.rows import TrafficRow

AGREEMENT = TEXT_AGREEMENT  # large is the reference: the judge's labels agree with it


def traffic(n: int, *, seed: int, label: Labeller | None = None, prefix: str = "req") -> list[TrafficRow]:
    """n text queries answered by every model; a confident answer agrees with the reference more often.

    ``label`` turns (query index, model, agrees) into the stored label (default: the agreement).
    """
    return kind_traffic(
        n, kind="text", agreement=AGREEMENT, seed=seed, prefix=prefix, label=label, judge="choice"
    )


def policy_from(rows: list[TrafficRow], path: Path) -> Policy:
    """Calibrate a policy on ``rows`` (as ``cascade traffic export`` + ``cascade calibrate``), save it."""
    runs = path.with_suffix(".runs.jsonl")
    write_runs(rows, runs)
    policy = calibrate(load_runs(runs), parse_tiers(TIERS)).policy
    save_policy(policy, path)
    return policy
