"""Calibration commands, mounted on the root ``cascade`` app."""

from __future__ import annotations

import typer

from calibration.calibrate_cli import register as register_calibrate
from calibration.evaluate_cli import register as register_evaluate


def register(app: typer.Typer) -> None:
    """Add ``calibrate`` and ``evaluate`` to the root app."""
    register_calibrate(app)
    register_evaluate(app)
