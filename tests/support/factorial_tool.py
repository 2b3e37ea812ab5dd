"""The tool-call questions the collection and replay tests ask: the factorial of 5 with its one
``math_factorial`` function (one accepted call), and a question no call answers (BFCL's
irrelevance subject)."""

from __future__ import annotations

import json
from typing import Any

# The function's one argument: an integer ``number``.
NUMBER_ARGUMENT = {"type": "object", "properties": {"number": {"type": "integer"}}, "required": ["number"]}
FACTORIAL_TOOL: dict[str, Any] = {
    "type": "function",
    "function": {
        "name": "math_factorial",
        "description": "Calculate the factorial of a given number.",
        "parameters": NUMBER_ARGUMENT,
    },
}
FACTORIAL_QUESTION = "Calculate the factorial of 5."
# The accepted calls, as BFCL writes them: math_factorial with number 5.
FACTORIAL_ANSWER = json.dumps([{"math_factorial": {"number": [5]}}])
IRRELEVANT_QUESTION = "Who wrote Hamlet?"
