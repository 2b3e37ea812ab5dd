"""Point labels that do not overprint each other, markers or plotted lines.

Matplotlib places an annotation exactly where it is told. With a dozen models at a handful of
prices (plaut-mc has three at $3.02e-05) and tier stars on the envelope, fixed offsets put labels on
top of each other and under curves. ``place_labels`` tries a ring of offsets around each point and
keeps the one whose rendered box overlaps the fewest already placed labels, line samples and
markers; a translucent white box keeps any line that still crosses a label from hiding it.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

# Offsets (points) from the anchor to the label's lower-left corner, nearest first. Labels to the
# left are shifted by their own width when placed.
_DIRECTIONS = ((5, -11), (5, 4), (-5, 4), (-5, -11), (-2, 9), (-2, -16), (9, -4), (-9, -4))
_RING = [(dx * radius, dy * radius) for radius in (1.0, 1.8, 2.8) for dx, dy in _DIRECTIONS]


@dataclass
class Label:
    """One label to place: text at data point (x, y), with matplotlib text properties."""

    text: str
    x: float
    y: float
    style: dict[str, Any] = field(default_factory=dict)


def _line_samples(axes: Any, spacing_px: float = 3.0) -> np.ndarray:
    """Display coordinates of every plotted line, densified so no segment skips a label box."""
    chunks = []
    for line in axes.get_lines():
        xy = np.column_stack(line.get_data()).astype(float)
        xy = xy[np.all(np.isfinite(xy), axis=1)]
        if xy.shape[0] == 0:
            continue
        if line.get_drawstyle().startswith("steps-post") and xy.shape[0] > 1:
            corners = np.column_stack([xy[1:, 0], xy[:-1, 1]])  # horizontal then vertical
            xy = np.insert(xy, np.arange(1, xy.shape[0]), corners, axis=0)
        display = axes.transData.transform(xy)
        if display.shape[0] > 1:
            lengths = np.hypot(*np.diff(display, axis=0).T)
            steps = np.maximum(1, np.ceil(lengths / spacing_px)).astype(int)
            t = np.concatenate([np.arange(n) / n for n in steps])
            start = np.repeat(display[:-1], steps, axis=0)
            delta = np.repeat(np.diff(display, axis=0), steps, axis=0)
            display = np.vstack([start + delta * t[:, None], display[-1:]])
        chunks.append(display)
    return np.vstack(chunks) if chunks else np.empty((0, 2))


def _inside(points: np.ndarray, box: tuple[float, float, float, float]) -> int:
    x0, y0, x1, y1 = box
    if points.shape[0] == 0:
        return 0
    return int(
        np.count_nonzero(
            (points[:, 0] >= x0) & (points[:, 0] <= x1) & (points[:, 1] >= y0) & (points[:, 1] <= y1)
        )
    )


def _overlap(a: tuple[float, float, float, float], b: tuple[float, float, float, float]) -> float:
    width = min(a[2], b[2]) - max(a[0], b[0])
    height = min(a[3], b[3]) - max(a[1], b[1])
    return max(0.0, width) * max(0.0, height)


def _least_cluttered_offset(
    annotation: Any,
    renderer: Any,
    frame: Any,
    placed: Sequence[tuple[float, float, float, float]],
    dots: np.ndarray,
    lines: np.ndarray,
    pixels_per_point: float,
    padding_px: float,
) -> tuple[float, float]:
    """The offset of ``_RING`` (in points) where the annotation stays in ``frame`` and covers the
    fewest placed boxes, marker dots and line samples (display coordinates); nearest among equals."""
    width = annotation.get_window_extent(renderer).width / pixels_per_point
    best, best_score = (0.0, 0.0), np.inf
    for rank, (dx, dy) in enumerate(_RING):
        offset = (dx - width if dx < 0 else dx, dy)
        annotation.xyann = offset
        extent = annotation.get_window_extent(renderer)
        box = (
            extent.x0 - padding_px,
            extent.y0 - padding_px,
            extent.x1 + padding_px,
            extent.y1 + padding_px,
        )
        outside = extent.x0 < frame.x0 or extent.x1 > frame.x1 or extent.y0 < frame.y0 or extent.y1 > frame.y1
        score = (
            1e6 * outside
            + 50.0 * sum(_overlap(box, other) for other in placed)
            + 1e3 * _inside(dots, box)
            + 20.0 * _inside(lines, box)
            + rank  # prefer the nearest offsets among equals
        )
        if score < best_score:
            best, best_score = offset, score
    return best


def place_labels(
    axes: Any, labels: Sequence[Label], markers: np.ndarray | None = None, padding_px: float = 2.0
) -> list[Any]:
    """Annotate ``labels`` in order (most important first), each at its least-cluttered offset.

    ``markers``: data coordinates of scatter points a label should not cover. Call after the
    axes' scales, limits and layout are final (the choice is made in display coordinates).
    """
    figure = axes.figure
    if figure.canvas is None or not hasattr(figure.canvas, "get_renderer"):
        from matplotlib.backends.backend_agg import FigureCanvasAgg

        FigureCanvasAgg(figure)
    renderer = figure.canvas.get_renderer()
    lines = _line_samples(axes)
    dots = axes.transData.transform(markers) if markers is not None and len(markers) else np.empty((0, 2))
    frame = axes.get_window_extent(renderer)
    pixels_per_point = figure.dpi / 72.0
    placed: list[tuple[float, float, float, float]] = []
    legend = axes.get_legend()
    if legend is not None:  # labels stay out of the legend's box
        extent = legend.get_window_extent(renderer)
        placed.append((extent.x0, extent.y0, extent.x1, extent.y1))
    annotations = []
    for label in labels:
        annotation = axes.annotate(
            label.text,
            (label.x, label.y),
            textcoords="offset points",
            xytext=(0, 0),
            ha="left",
            va="bottom",
            zorder=8,
            bbox={"boxstyle": "square,pad=0.1", "facecolor": "white", "edgecolor": "none", "alpha": 0.8},
            **label.style,
        )
        annotation.xyann = _least_cluttered_offset(
            annotation, renderer, frame, placed, dots, lines, pixels_per_point, padding_px
        )
        extent = annotation.get_window_extent(renderer)
        placed.append((extent.x0, extent.y0, extent.x1, extent.y1))
        annotations.append(annotation)
    return annotations
