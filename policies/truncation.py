"""Cut answers: an answer that stopped at a completion cap its request did not set.

``cut_short(request, answer)`` is true when a choice of ``answer`` (a chat or legacy completions
body) has ``finish_reason: "length"`` at a cap the client did not ask for: the request sets no
cap under any name an upstream may honour (``money.charges.COMPLETION_CAP_FIELDS``: ``max_tokens``,
``max_completion_tokens``, llama.cpp's ``n_predict``; the cap came from the model's request defaults
or the upstream's own limit), or it sets one and the answer stopped before reaching it (the
upstream's context ran out first). An answer cut at the client's own cap is what the client asked
for, so it is not cut short. The Responses (``max_output_tokens``) and Messages (``max_tokens``)
caps reach here as ``max_tokens``: their edges translate them into the chat body.

Shared by the gateway (a scored stage whose answer was cut short escalates as ``truncated``),
``cascade collect`` (the runs table's ``truncated`` column) and calibration (such a row is never
accepted), so a cut answer counts the same way live and in the promises calibrated from rows.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from money.charges import COMPLETION_CAP_FIELDS
from money.usage import is_count, positive_int


def client_cap(request: Mapping[str, Any]) -> int | None:
    """The completion cap the request itself sets under any of ``COMPLETION_CAP_FIELDS``, if any.

    The smallest, when it sets several: an upstream honours one of them, and an answer that
    reached the smallest stopped at a cap the client chose whichever that was."""
    caps = [cap for name in COMPLETION_CAP_FIELDS if (cap := positive_int(request.get(name)))]
    return min(caps) if caps else None


def cut_short(request: Mapping[str, Any], answer: Mapping[str, Any]) -> bool:
    """Whether ``answer`` stopped at a completion cap ``request`` did not set (see the module docstring)."""
    choices = answer.get("choices")
    if not isinstance(choices, list):
        return False
    if not any(isinstance(c, Mapping) and c.get("finish_reason") == "length" for c in choices):
        return False
    cap = client_cap(request)
    if cap is None:
        return True
    usage = answer.get("usage")
    completion = usage.get("completion_tokens") if isinstance(usage, Mapping) else None
    # Without a token count the stop is taken to be at the client's cap (today's rule).
    return is_count(completion) and completion < cap
