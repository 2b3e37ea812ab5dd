"""Calibration commands, mounted on the root ``cascade`` app."""

from __future__ import annotations

import typer

from calibration.commands.calibrate_cli import register as register_calibrate
from calibration.commands.evaluate_cli import register as register_evaluate
from calibration.commands.recalibrate_cli import register as register_recalibrate


def register(app: typer.Typer) -> None:
    """Add ``calibrate``, ``evaluate`` and ``recalibrate`` to the root app."""
    register_calibrate(app)
    register_evaluate(app)
    register_recalibrate(app)
