"""PNG plots of a calibration: pair frontiers, envelope, switching points, hull, tiers."""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

import numpy as np

from calibration.envelope import Envelope
from calibration.reporting.labels import Label, place_labels
from calibration.routing.mechanisms import MechanismCurves
from calibration.tiers import TierSolution

# The evaluation plots' colours of the same methods (calibration.reporting.evaluation_plots).
ROUTER_COLOR, HYBRID_COLOR = "#9467bd", "#e377c2"


def _pyplot() -> Any:
    import matplotlib

    matplotlib.use("Agg")  # files only; never needs a display
    import matplotlib.pyplot as plt

    return plt


def envelope_figure(
    envelope: Envelope,
    tiers: Mapping[str, TierSolution] | None = None,
    title: str = "",
    curves: MechanismCurves | None = None,
) -> Any:
    """Matplotlib figure: pair frontiers (light), envelope (bold), switching points, singles, hull, tiers;
    with ``curves`` (``cascade calibrate --mechanisms``), the router's and route-then-cascade's
    frontiers on the same calibration rows.

    The cost axis (USD per query) is logarithmic.
    """
    plt = _pyplot()
    figure, axes = plt.subplots(figsize=(10, 6.5))
    _plot_curves(axes, envelope)
    if curves is not None:
        _plot_mechanisms(axes, curves)
    pool = set(envelope.pool)
    singles = list(zip(envelope.model_names, envelope.model_cost, envelope.model_quality, strict=True))
    for name, cost, quality in singles:
        axes.scatter(cost, quality, s=40, color="k" if name in pool else "0.55", zorder=6)
    axes.scatter([], [], s=40, color="k", label="single models (grey: dominated)")
    for solution in (tiers or {}).values():
        axes.scatter(solution.cost, solution.quality, marker="*", s=180, color="C2", edgecolor="k", zorder=7)
    if tiers:
        axes.scatter([], [], marker="*", s=120, color="C2", edgecolor="k", label="tiers")
    axes.set_xscale("log")
    axes.set_xlabel("mean cost per query (USD, log scale)")
    axes.set_ylabel("mean quality")
    axes.set_title(title or "Cost-quality envelope")
    axes.grid(True, which="both", alpha=0.25)
    axes.legend(loc="lower right", fontsize=8)
    figure.tight_layout()
    # Labels last: their placement avoids lines, markers, the legend and each other on the final layout.
    tier_labels = [
        Label(name, s.cost, s.quality, {"fontsize": 9, "fontweight": "bold", "color": "C2"})
        for name, s in (tiers or {}).items()
    ]
    model_labels = [
        Label(name, cost, quality, {"fontsize": 7.5, "color": "k" if name in pool else "0.45"})
        for name, cost, quality in sorted(singles, key=lambda single: single[0] not in pool)
    ]
    markers = [(cost, quality) for _, cost, quality in singles]
    markers += [(s.cost, s.quality) for s in (tiers or {}).values()]
    place_labels(axes, tier_labels + model_labels, np.array(markers, dtype=float))
    return figure


def _plot_curves(axes: Any, envelope: Envelope) -> None:
    """The pair frontiers, the envelope, its concave hull and its switching points, with legend entries."""
    for curve in envelope.pairs.values():
        axes.plot(curve.cost, curve.quality, color="0.75", linewidth=0.7, zorder=1)
    axes.plot([], [], color="0.75", linewidth=0.7, label=f"pair frontiers ({len(envelope.pairs)})")
    axes.step(
        envelope.cost,
        envelope.quality,
        where="post",
        color="C0",
        linewidth=2.4,
        zorder=3,
        label="envelope (best deterministic route)",
    )
    hull = envelope.hull
    # Mixtures are straight chords in linear cost; sample them densely so the log axis shows them right.
    grid = np.union1d(np.geomspace(envelope.cost[0], envelope.cost[-1], 400), envelope.cost[hull])
    axes.plot(
        grid,
        np.interp(grid, envelope.cost[hull], envelope.quality[hull]),
        linestyle="--",
        color="C1",
        linewidth=1.4,
        zorder=4,
        label="concave hull (randomized mixtures)",
    )
    switching = np.asarray(envelope.switching_points, dtype=int)
    if switching.size:
        axes.scatter(
            envelope.cost[switching],
            envelope.quality[switching],
            marker="D",
            s=36,
            color="C3",
            zorder=5,
            label="switching points",
        )


def _plot_mechanisms(axes: Any, curves: MechanismCurves) -> None:
    """The router's frontier over its price sweep and the hybrid's over its candidates (steps)."""
    for cost, quality, color, label in (
        (curves.routed_cost, curves.routed_quality, ROUTER_COLOR, "router (price sweep)"),
        (curves.hybrid_cost, curves.hybrid_quality, HYBRID_COLOR, "route-then-cascade (hybrid)"),
    ):
        positive = cost > 0  # a log axis cannot show a free route
        axes.step(
            cost[positive], quality[positive], where="post", color=color, linewidth=1.8, zorder=3, label=label
        )


def shadow_price_figure(envelope: Envelope) -> Any:
    """Matplotlib figure: the shadow price (hull slope, quality per USD) against cost, log-log."""
    plt = _pyplot()
    figure, axes = plt.subplots(figsize=(10, 3.5))
    hull = envelope.hull
    if hull.size >= 2:
        cost, quality = envelope.cost[hull], envelope.quality[hull]
        slope = np.diff(quality) / np.diff(cost)
        axes.step(cost, np.append(slope, slope[-1]), where="post", color="C1")
        axes.set_yscale("log")
    axes.set_xscale("log")
    axes.set_xlabel("mean cost per query (USD, log scale)")
    axes.set_ylabel("shadow price (quality / USD)")
    axes.set_title("Shadow price along the concave hull (marginal quality per extra dollar)")
    axes.grid(True, which="both", alpha=0.25)
    figure.tight_layout()
    return figure


def write_calibration_plots(
    directory: str | Path,
    envelope: Envelope,
    tiers: Mapping[str, TierSolution] | None = None,
    title: str = "",
    curves: MechanismCurves | None = None,
) -> dict[str, Path]:
    """Write envelope.png (with ``curves``: the router's and hybrid's frontiers too) and
    shadow_price.png into ``directory``; returns name -> path."""
    plt = _pyplot()
    directory = Path(directory)
    directory.mkdir(parents=True, exist_ok=True)
    written = {}
    for name, figure in (
        ("envelope", envelope_figure(envelope, tiers, title, curves)),
        ("shadow_price", shadow_price_figure(envelope)),
    ):
        path = directory / f"{name}.png"
        figure.savefig(path, dpi=120)
        plt.close(figure)
        written[name] = path
    return written
