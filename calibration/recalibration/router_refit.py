"""The router's part of ``cascade recalibrate``: its features from the traffic, and what to refit.

A policy with a router (``policies.schema.RouterSpec``) is recalibrated like any other, with the
mechanisms ``cascade calibrate --mechanisms`` chooses from (``calibration.routing.mechanisms``):
on the calibration part of the traffic, each tier again chooses, held out, between its cascade, a
router refitted on that part, and route-then-cascade (the refitted router, a pair, ``direct_below``
and the threshold calibrated on the queries it cascades). The comparison and the push rule are
the cascades' own (``calibration.recalibration.compare``): the new policy replaces the current one
only if it is not worse on the held-out part, each tier scored as it is served (a routed tier by
its router, ``calibration.recalibration.routed_outcomes``).

The features are the ones the gateway stored with each sampled request (the rows' ``route``,
``gateway.learning.router_inputs``), of the current router's feature set. Queries whose rows
carry none (sampled before the policy had a router, or when the embedding pool was saturated) are
left out of a kind that needs features, and a note says how many.

Which mechanisms: ``--mechanisms`` when given; else all three for a kind the current policy
serves with a router, the cascade only for any other (a policy without a router stays one).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, replace

import numpy as np

from calibration.recalibration.options import RecalibrateOptions
from calibration.recalibration.traffic_runs import KindRuns
from calibration.routing.fit import DEFAULT_COMPONENTS
from calibration.routing.mechanisms import MECHANISMS, RoutingOptions
from policies.kinds import kind_policy
from policies.route_features import CHEAP, FEATURE_SETS, feature_dims
from policies.schema import Policy
from traffic.rows import TrafficRow


class RouterRefitError(Exception):
    """The router cannot be refitted or compared on this traffic (one-line message)."""


@dataclass(frozen=True)
class RouterRefit:
    """Each kind's runs (with their router features where needed), its routing options (a kind
    without one is calibrated as cascades only), and notes for the user."""

    runs: dict[str, KindRuns]
    routing: dict[str, RoutingOptions]
    notes: list[str]


def router_refit(
    eligible: dict[str, KindRuns],
    rows: Sequence[TrafficRow],
    current: Policy | None,
    options: RecalibrateOptions,
) -> RouterRefit:
    """Attach features and choose mechanisms per kind (module docstring); RouterRefitError when the
    current policy routes a kind and no query of it carries features to score it with."""
    runs, routing, notes = dict(eligible), {}, []
    for kind, one in eligible.items():
        serving = None if current is None else kind_policy(current, kind)
        spec = None if serving is None else serving.router
        mechanisms = _mechanisms(options, spec is not None)
        routes_now = serving is not None and any(t.routing is not None for t in serving.tiers.values())
        if mechanisms == ("cascade",) and not routes_now:
            continue
        feature_set = spec.features if spec is not None else (options.features or CHEAP)
        if feature_set not in FEATURE_SETS:
            raise RouterRefitError(
                f"--features {feature_set}: known feature sets are {', '.join(FEATURE_SETS)}"
            )
        found = _features_by_query(rows, feature_set)
        ids = [str(q) for q in one.new.query_ids]
        keep = np.array([i for i, q in enumerate(ids) if q in found], dtype=np.int64)
        if keep.size < min(options.min_queries, len(ids)) or keep.size == 0:
            # Too few to calibrate on (the kind's own --min-queries rule), or to score a router on.
            if routes_now:
                raise RouterRefitError(
                    f"the current policy routes {kind} requests with its {feature_set} router, and only "
                    f"{keep.size} sampled {kind} queries carry its features (route column; "
                    f"--min-queries {options.min_queries})"
                )
            notes.append(
                f"kind {kind}: only {keep.size} queries carry {feature_set} router features "
                f"(--min-queries {options.min_queries}): cascades only"
            )
            continue
        if keep.size < len(ids):
            notes.append(
                f"kind {kind}: {len(ids) - keep.size} of {len(ids)} queries carry no {feature_set} router "
                "features (sampled without them): left out"
            )
        features = np.vstack([found[ids[i]] for i in keep])
        new = replace(one.new.subset(keep), features=features)
        old = None if one.current is None else replace(one.current.subset(keep), features=features)
        runs[kind] = KindRuns(kind, new, old)
        if mechanisms == ("cascade",):
            continue
        if not options.heldout_splits:
            notes.append(f"kind {kind}: the router is not refitted: choosing it needs --heldout")
            continue
        components = options.router_components or (
            spec.components if spec is not None else DEFAULT_COMPONENTS
        )
        routing[kind] = RoutingOptions(mechanisms, feature_set, components, options.seed)
    return RouterRefit(runs, routing, notes)


def _mechanisms(options: RecalibrateOptions, has_router: bool) -> tuple[str, ...]:
    if options.mechanisms is not None:
        unknown = [m for m in options.mechanisms if m not in MECHANISMS]
        if unknown or not options.mechanisms:
            raise RouterRefitError(
                f"--mechanisms takes some of {', '.join(MECHANISMS)}, got {','.join(options.mechanisms)}"
            )
        return tuple(options.mechanisms)
    return MECHANISMS if has_router else ("cascade",)


def _features_by_query(rows: Sequence[TrafficRow], feature_set: str) -> dict[str, np.ndarray]:
    """``{query_id: vector}`` of the rows whose ``route`` holds ``feature_set``'s full vector."""
    dims = feature_dims(feature_set)
    found: dict[str, np.ndarray] = {}
    for row in rows:
        route = row.route
        if route is None or row.query_id in found or route.get("features") != feature_set:
            continue
        values = route.get("values")
        if isinstance(values, list) and len(values) == dims:
            vector = np.asarray(values, dtype=np.float64)
            if np.all(np.isfinite(vector)):
                found[row.query_id] = vector
    return found
