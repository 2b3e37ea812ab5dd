"""The gateway as an ASGI app for uvicorn, built from the config file named by $GATEWAY_CONFIG.

Used by run_bench.py so the gateway runs under exactly the same uvicorn flags as the passthrough.
"""

from __future__ import annotations

import os

from gateway.app import create_app
from gateway.config import Settings

app = create_app(Settings.from_yaml(os.environ["GATEWAY_CONFIG"]))
