"""Reading an upstream's answer: every failure to read one is one error, ``UnreadableAnswerError``.

An upstream answer is data the gateway reads at a few places (scoring and checking a stage's
answer, shaping it for the client, translating it to another API, relaying a live stream). An
answer can defeat any of them: nested deeper than a parser goes, a field of an unexpected type (a
``finish_reason`` that is a list), a chunk too large. Each of those places catches
``READ_FAILURES`` and raises ``unreadable(model, exc)`` (or reads inside ``reading_answer``): the
failure becomes ``UnreadableAnswerError`` (502 ``upstream_unreadable``), logged once
(``answer_unreadable``), which the engine treats as the stage's failure (a cheap stage escalates,
a final stage falls back or fails) and the endpoint maps like every GatewayError into the API's
own error shape. The call that produced the answer was charged before it was read, so the charge
stands (docs/contracts.md#faults).
"""

from __future__ import annotations

import logging
from collections.abc import Iterator
from contextlib import contextmanager

from gateway.wire.errors import UnreadableAnswerError
from gateway.wire.logs import log_event

# What reading an answer raises when the answer defeats it (orjson's errors are ValueError and
# TypeError subclasses). Anything else (CancelledError, UpstreamFailure, GatewayError) passes.
READ_FAILURES = (ValueError, TypeError, KeyError, IndexError, AttributeError, RecursionError)


def unreadable(model: str | None, exc: BaseException) -> UnreadableAnswerError:
    """The one error of an answer ``model`` sent that could not be read (logged once, here).

    Used as ``except READ_FAILURES as exc: raise unreadable(model, exc) from exc`` (a ``try`` costs
    nothing on the request path until it catches)."""
    why = f"{type(exc).__name__}: {str(exc)[:120]}"
    log_event("answer_unreadable", level=logging.WARNING, model=model, error=why)
    return UnreadableAnswerError(
        f"upstream model {model!r} sent an answer the gateway cannot read ({type(exc).__name__})"
    )


@contextmanager
def reading_answer(model: str | None) -> Iterator[None]:
    """Turn a failure to read ``model``'s answer inside the block into ``UnreadableAnswerError``
    (for the cascade's stage reading, where a ``with`` block reads better than a ``try``)."""
    try:
        yield
    except READ_FAILURES as exc:
        raise unreadable(model, exc) from exc
