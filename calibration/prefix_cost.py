"""What a cheap stage cancelled after its prefix is charged, for calibrating a ``prefix`` commit rule.

Under the ``prefix`` rule (``policies.commit``) a streamed cheap stage is scored on its first tokens;
when it escalates, the gateway cancels the call. A cancelled stream has no ``usage`` (an
OpenAI-compatible server sends it in the last chunk), so the one charging rule
(``money.charges.cancelled_stream_charge``, which the gateway's ``cancelled`` attempts are charged
by) charges the prompt at its bound (one token per byte of the request as sent) and the chunks read
(the prefix) plus the tokens the model declares it may generate before the close reaches it
(``cancel_overrun_tokens``), within the cap the request sent; a model declaring none is charged that
cap (its worst case). Calibration calls the same function with the recorded size and cap, so the
two cannot drift apart.

A stage that answers (the prefix committed, the rest relayed) is charged its usage, as under the
buffered rule: its whole recorded cost. An answer no longer than the prefix was read whole and is
charged its usage either way (nothing cancelled, nothing saved).

The request's size is the runs' ``request_bytes`` column (``cascade collect`` records the bytes it
sent) plus ``money.charges.SENT_FIELDS_BYTES`` for the streaming fields the gateway adds; runs
without the column are estimated at ``BYTES_PER_PROMPT_TOKEN`` bytes per recorded prompt token plus
the same allowance (the prompt is a small part of the charge: the cheap members' prompts cost
1/4 of a generated token each). Its cap is the runs' ``completion_cap`` column.
"""

from __future__ import annotations

import numpy as np

from money import Price
from money.charges import SENT_FIELDS_BYTES, cancelled_stream_charge

# Runs without ``request_bytes``: English text and chat-template JSON run at about 4 bytes a token.
BYTES_PER_PROMPT_TOKEN = 4


def cancelled_charge(
    price: Price, request_bytes: int, streamed_tokens: int, cap: int, overrun: int | None
) -> float:
    """USD the gateway charges a stream it cancelled after ``streamed_tokens`` output chunks, whose
    request was ``request_bytes`` long as sent with completion cap ``cap``, to a model declaring
    ``overrun`` tokens generated after a cancel (None: undeclared, the cap is charged). A recorded
    request is a plain one: no field a template wraps, no priced content part, one choice."""
    return cancelled_stream_charge(price, int(request_bytes), streamed_tokens, overrun, cap).usd


def escalation_saving(
    whole_cost: np.ndarray,
    prices: list[Price],
    request_bytes: np.ndarray,
    caps: np.ndarray,
    overruns: list[int | None],
    read: np.ndarray,
    continues: np.ndarray,
) -> np.ndarray:
    """(r,) USD not charged when each row's stage escalates under the prefix rule.

    ``whole_cost``: the row's cost as answered whole; ``prices``: each row's model price;
    ``request_bytes``: the request's bytes as sent (streaming fields included); ``caps``: the
    completion cap it sent; ``overruns``: its model's declared overrun after a cancel (None:
    undeclared); ``read``: tokens of the prefix; ``continues``: the answer goes on past the prefix
    (else it is read whole: no saving). Negative where the cancelled call is charged more than the
    whole answer (its prompt bound above its usage, or the overrun past its end).
    """
    saving = np.zeros(whole_cost.shape[0])
    for row in np.flatnonzero(continues):
        charged = cancelled_charge(
            prices[row], int(request_bytes[row]), int(read[row]), int(caps[row]), overruns[row]
        )
        saving[row] = float(whole_cost[row]) - charged
    return saving


def sent_request_bytes(
    request_bytes: np.ndarray | None, prompt_tokens: np.ndarray | None, rows: int
) -> np.ndarray:
    """(r,) the bytes of each row's request as the gateway streams it (see the module docstring)."""
    if request_bytes is not None:
        return np.asarray(request_bytes, dtype=np.float64) + SENT_FIELDS_BYTES
    if prompt_tokens is None:
        raise ValueError("a prefix rule's cost needs the runs' request_bytes or prompt_tokens column")
    return np.asarray(prompt_tokens, dtype=np.float64) * BYTES_PER_PROMPT_TOKEN + SENT_FIELDS_BYTES
