"""Reading an upstream's answer: every failure to read one is one error, ``UnreadableAnswerError``.

An upstream answer is data the gateway reads at a few places (scoring and checking a stage's
answer, shaping it for the client, translating it to another API, relaying a live stream). An
answer can defeat any of them: nested deeper than a parser goes, a field of an unexpected type (a
``finish_reason`` that is a list), a chunk too large. ``reading_answer(model)`` wraps each of those
places: a failure there becomes ``UnreadableAnswerError`` (502 ``upstream_unreadable``), logged
once (``answer_unreadable``), which the engine treats as the stage's failure (a cheap stage
escalates, a final stage falls back or fails) and the endpoint maps like every GatewayError into
the API's own error shape. The call that produced the answer was charged before it was read, so the
charge stands (docs/contracts.md#faults).
"""

from __future__ import annotations

import logging
from collections.abc import Iterator
from contextlib import contextmanager

from gateway.errors import UnreadableAnswerError
from gateway.logs import log_event

# What reading an answer raises when the answer defeats it (orjson's errors are ValueError and
# TypeError subclasses). Anything else (CancelledError, UpstreamFailure, GatewayError) passes.
_READ_FAILURES = (ValueError, TypeError, KeyError, IndexError, AttributeError, RecursionError)


@contextmanager
def reading_answer(model: str | None) -> Iterator[None]:
    """Turn a failure to read ``model``'s answer inside the block into ``UnreadableAnswerError``."""
    try:
        yield
    except _READ_FAILURES as exc:
        why = f"{type(exc).__name__}: {str(exc)[:120]}"
        log_event("answer_unreadable", level=logging.WARNING, model=model, error=why)
        raise UnreadableAnswerError(
            f"upstream model {model!r} sent an answer the gateway cannot read ({type(exc).__name__})"
        ) from exc
