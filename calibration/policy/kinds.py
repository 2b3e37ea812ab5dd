"""Calibration per request kind: one policy with a route table for each kind the runs hold.

The runs rows of each kind (the ``kind`` column, ``calibration.run_kinds``; missing = ``text``) are
calibrated as a runs table of their own, with the same code, tiers file and options (envelope,
tiers, held-out expectations). The policy's top level comes from the ``text`` rows; every other
kind becomes a section ``kinds.KIND`` (docs/contracts.md#policy-file). A runs table without text
rows has no text calibration to put at the top level, which the schema requires and which serves
every request kind without a section: then the first kind present (``tool_call`` before
``structured_output``) is the top level, and ``CalibratedKinds.notes`` says so, because text
requests would then be served by that kind's routes.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from calibration.bounds import BoundSettings
from calibration.heldout_expected import HeldoutSettings
from calibration.policy.benefit_choice import BenefitSettings
from calibration.policy.calibrate import Calibrated, calibrate
from calibration.policy.policy_writer import section_document
from calibration.routing.mechanisms import RoutingOptions
from calibration.run_kinds import DEFAULT_KIND, RunKindError, kinds_in
from calibration.runs import RunsMatrix, load_runs
from calibration.runs_columns import RunsError
from calibration.table_io import TableReadError
from calibration.tiers import TiersSpec, UnreachableTierError
from policies.schema import Policy
from policies.store import build_policy


@dataclass(frozen=True)
class CalibratedKinds:
    """Each kind's calibration (``text`` first), which kind is the top level, and the one policy."""

    top_kind: str
    per_kind: dict[str, Calibrated]
    policy: Policy
    notes: tuple[str, ...] = ()


def load_runs_by_kind(path: str | Path, **options: Any) -> dict[str, RunsMatrix]:
    """The runs of each kind present (``REQUEST_KINDS`` order), each loaded by ``load_runs(**options)``.

    A table of one kind loads exactly as ``load_runs`` loads it. ``RunsError`` on bad input.
    """
    kinds = runs_kinds(path, options.get("where"))
    return {kind: load_kind_runs(path, kind, kinds, **options) for kind in kinds}


def runs_kinds(path: str | Path, where: Mapping[str, str] | None = None) -> list[str]:
    """The kinds a runs table has rows of (``kinds_in``), ``[text]`` for a table without rows (its
    load then says there are none); ``RunsError`` on bad input."""
    try:
        return kinds_in(Path(path), where) or [DEFAULT_KIND]
    except (TableReadError, RunKindError) as exc:
        raise RunsError(str(exc)) from None


def load_kind_runs(path: str | Path, kind: str, kinds: Sequence[str], **options: Any) -> RunsMatrix:
    """The runs of ``kind`` of a table holding ``kinds`` (``runs_kinds``), loaded by
    ``load_runs(**options)``: the whole table when it holds that kind only."""
    if len(kinds) <= 1:
        return load_runs(path, **options)
    return load_runs(path, kind=kind, **options)


def top_level_kind(kinds: Sequence[str]) -> str:
    """``text`` when present, else the first kind."""
    return DEFAULT_KIND if DEFAULT_KIND in kinds else kinds[0]


def calibrate_kinds(
    matrices: Mapping[str, RunsMatrix],
    spec: TiersSpec,
    *,
    randomize: bool = False,
    heldout: HeldoutSettings | None = None,
    routing: Mapping[str, RoutingOptions] | None = None,
    bounds: BoundSettings | None = None,
    benefit: BenefitSettings | None = None,
) -> CalibratedKinds:
    """Calibrate every kind's matrix and assemble the policy (module docstring).

    Raises ``UnreachableTierError`` naming the kind (when there are several) whose runs cannot
    reach a tier's ``min_quality``. ``routing``: per kind, the routing mechanisms to choose from
    (``calibration.routing.mechanisms``); a kind without an entry is calibrated as cascades only.
    """
    if not matrices:
        raise ValueError("no runs to calibrate")
    per_kind: dict[str, Calibrated] = {}
    for kind, matrix in matrices.items():
        try:
            per_kind[kind] = calibrate(
                matrix,
                spec,
                randomize=randomize,
                heldout=heldout,
                routing=(routing or {}).get(kind),
                bounds=bounds,
                benefit=benefit,
            )
        except UnreachableTierError as exc:
            if len(matrices) == 1:
                raise
            raise UnreachableTierError(f"kind {kind}: {exc}", exc.tier, exc.warnings) from None
    top = top_level_kind(list(per_kind))
    notes = []
    if top != DEFAULT_KIND:
        notes.append(
            f"the runs have no text rows: the policy's top level is calibrated from the {top} rows, "
            "and it also serves text requests"
        )
    if len(per_kind) == 1:
        return CalibratedKinds(top, per_kind, per_kind[top].policy, tuple(notes))
    document = dict(per_kind[top].document)
    document["kinds"] = {
        kind: section_document(document, calibrated.document)
        for kind, calibrated in per_kind.items()
        if kind != top
    }
    return CalibratedKinds(top, per_kind, build_policy(document), tuple(notes))
