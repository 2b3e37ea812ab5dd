"""The tool-call request the kind tests send: a question and its one ``get_weather`` function, and
the call as a model that writes calls in its content answers it."""

from __future__ import annotations

from typing import Any

MESSAGES: list[dict[str, Any]] = [{"role": "user", "content": "What is the weather in Paris?"}]
TOOLS: list[dict[str, Any]] = [
    {
        "type": "function",
        "function": {
            "name": "get_weather",
            "parameters": {
                "type": "object",
                "properties": {"city": {"type": "string"}},
                "required": ["city"],
            },
        },
    }
]
CALL_AS_CONTENT = '{"name": "get_weather", "arguments": {"city": "Paris"}}'
