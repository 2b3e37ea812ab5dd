"""The chart documents the aggregate pages hand to the console's script (``data-chart``, JSON): uPlot's
columns (x first, then one column per series, ``null`` where a series has no point) and what to draw.

Kinds: ``envelope`` (cost per request on a log axis against quality: the calibration envelope as a
line, each tier's promised and live point as markers), ``histogram`` (bars per score bucket and a
vertical line at the threshold) and ``lines`` (time on x: the keys' spend).
"""

from __future__ import annotations

import math
from typing import Any

import orjson

from gateway.console.aggregates.keys import KeysView
from gateway.console.aggregates.tiers import ScoreHistogram, TiersView


def chart_json(document: dict[str, Any]) -> str:
    """The document as the attribute's JSON text (the template escapes it)."""
    return orjson.dumps(document).decode()


def envelope_chart(view: TiersView) -> dict[str, Any]:
    """The envelope and the tiers' points: x is cost per request (USD), y quality."""
    points = [(float(p["cost_usd"]), "envelope", float(p["quality"])) for p in view.envelope]
    labels = ["envelope"]
    for tier in view.tiers:
        promised = tier.promised
        if promised.cost_usd and promised.quality is not None:
            points.append((promised.cost_usd, f"{tier.name} promised", promised.quality))
            labels.append(f"{tier.name} promised")
        live = tier.live
        if live.cost_usd and live.quality is not None:
            points.append((live.cost_usd, f"{tier.name} live", live.quality))
            labels.append(f"{tier.name} live")
    points = [p for p in points if p[0] > 0]  # a log axis has no zero
    points.sort()
    xs = [p[0] for p in points]
    columns = [[p[2] if p[1] == label else None for p in points] for label in labels]
    return {"kind": "envelope", "x": xs, "series": labels, "columns": columns}


def histogram_chart(histogram: ScoreHistogram) -> dict[str, Any]:
    """Live scores per bucket (x: the bucket's upper bound; the ``+Inf`` bucket left out) and the
    threshold."""
    finite = [(bound, count) for bound, count in histogram.buckets if math.isfinite(bound)]
    # Start at the first bucket holding a score (or at 0, or under the threshold, if lower): the
    # scorers' scores mostly lie in [0, 1], the buckets reach -5 for the ones that go negative.
    low = min(0.0, histogram.threshold if histogram.threshold is not None else 0.0)
    first = next((i for i, (bound, count) in enumerate(finite) if count or bound >= low), len(finite))
    finite = finite[max(0, first - 1) :]
    return {
        "kind": "histogram",
        "x": [bound for bound, _ in finite],
        "series": [f"{histogram.model} scores"],
        "columns": [[count for _, count in finite]],
        "threshold": histogram.threshold,
    }


def spend_chart(view: KeysView, names: dict[str, str]) -> dict[str, Any]:
    """The charted keys' spend (USD) at each sampled minute (x: unix seconds)."""
    return {
        "kind": "lines",
        "x": view.minutes,
        "series": [names.get(key_id) or key_id for key_id in view.spend_series],
        "columns": list(view.spend_series.values()),
    }
