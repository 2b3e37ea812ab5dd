"""Upstream exchanges recorded from real servers (tests/support/replies/), loaded once.

``CALL_AS_CONTENT``: llama-server serving Qwen2.5-Coder-0.5B asked a tool-call question; it wrote the
call as JSON in its content (``tool_calls: content``), with logprobs: ``{"request": ..., "reply":
...}``.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

REPLIES = Path(__file__).parent / "replies"

CALL_AS_CONTENT: dict[str, Any] = json.loads(
    (REPLIES / "llama_server_qwen2.5_coder_0.5b_call_as_content.json").read_text()
)
