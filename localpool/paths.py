"""Where the pool keeps its files: ``$CASCADE_HOME`` or ``./.cascade`` (gitignored).

Layout: ``cache/wheels/`` (downloaded wheels, removed once a model is assembled), ``models/`` (GGUF
files + ``.sha256`` stamps), ``run/`` (``NAME.pid``, ``NAME.log`` of running servers, the demo's
generated gateway config). ``$CASCADE_RUN_DIR`` moves ``run/`` elsewhere, e.g. to a writable
``/tmp`` when the pool itself is installed read-only in an image.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path


@dataclass(frozen=True)
class PoolPaths:
    """Directories of one pool home."""

    home: Path
    run_dir: Path | None = None

    @classmethod
    def default(cls) -> PoolPaths:
        """``$CASCADE_HOME`` if set, else ``.cascade`` under the working directory."""
        home = os.environ.get("CASCADE_HOME")
        run_dir = os.environ.get("CASCADE_RUN_DIR")
        return cls(Path(home) if home else Path.cwd() / ".cascade", Path(run_dir) if run_dir else None)

    @property
    def wheels(self) -> Path:
        return self.home / "cache" / "wheels"

    @property
    def models(self) -> Path:
        return self.home / "models"

    @property
    def run(self) -> Path:
        return self.run_dir or self.home / "run"

    def model_file(self, file_name: str) -> Path:
        return self.models / file_name

    def pid_file(self, name: str) -> Path:
        return self.run / f"{name}.pid"

    def log_file(self, name: str) -> Path:
        return self.run / f"{name}.log"
