"""The ``cascade calibrate``, ``evaluate`` and ``recalibrate`` commands, their shared options and
how they fail (``cli.register`` mounts them on the root app)."""
