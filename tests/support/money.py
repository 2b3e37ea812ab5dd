"""A request's worst case as the spend contract defines it, priced like the gateway's config, and
the price of what an upstream billed."""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from typing import Any

import orjson

from tests.support.scripted_upstream import Produced

# The gateway's completion bound when a request names no cap.
DEFAULT_COMPLETION_BOUND = 4096
# Bytes a reservation adds per model for what the gateway adds to the request it sends (besides the
# upstream model id): docs/contracts.md#charges, ``SENT_FIELDS_BYTES``.
SENT_FIELDS_BYTES = 160
_CAP_FIELDS = ("max_completion_tokens", "max_tokens", "n_predict")


def worst_case_usd(
    body: Mapping[str, Any],
    models: Sequence[str],
    prices: Mapping[str, tuple[float, float]],
    completion_cap: int | None = None,
) -> float:
    """The worst case of ``body`` over ``models``: each called with one prompt token per byte of the
    request body (and of what the gateway adds to what it sends: ``SENT_FIELDS_BYTES`` and the
    upstream model id, ``up-<name>`` as every test config names it) and ``completion_cap``
    completion tokens (default: the body's largest cap, else ``DEFAULT_COMPLETION_BOUND``) per
    billed choice (``max(n, best_of)``); ``prices`` are USD per million (input, output) tokens by
    model name."""
    size = len(orjson.dumps(body))
    if completion_cap is None:
        caps = [body[f] for f in _CAP_FIELDS if body.get(f)]
        completion_cap = max(caps) if caps else DEFAULT_COMPLETION_BOUND
    choices = max(int(body.get("n") or 1), int(body.get("best_of") or 1))
    return sum(
        ((size + SENT_FIELDS_BYTES + len(f"up-{m}")) * prices[m][0] + completion_cap * choices * prices[m][1])
        / 1e6
        for m in models
    )


def priced_usd(billed: Iterable[Produced], prices: Mapping[str, tuple[float, float]]) -> float:
    """USD of an upstream's usage records (``ScriptedUpstream.billed`` or ``produced``) at
    ``prices``: USD per million (input, output) tokens by upstream model id."""
    return sum(
        (p.prompt_tokens * prices[p.model or ""][0] + p.completion_tokens * prices[p.model or ""][1]) / 1e6
        for p in billed
    )
