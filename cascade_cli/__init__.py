"""The ``cascade`` command line: one root that mounts each package's own commands."""
