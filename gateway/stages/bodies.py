"""The upstream body of a stage and the client's view of an upstream answer.

``upstream_body``: the client's fields over a pool member's request defaults, ``model`` rewritten,
logprobs asked in the model's own form when a stage is scored (``scored_stage_body``), usage asked
on a streamed stage. ``client_body``: the configured model name, logprobs only if the client asked
(cut down to the alternatives it asked). Used by the cascade engine (gateway.engine.cascade), the endpoint
and the traffic sampler's shadow calls.
"""

from __future__ import annotations

from typing import Any

import orjson

from gateway.config.settings import ModelConfig
from gateway.wire.requests import ParsedRequest
from money.charges import DEFAULT_COMPLETION_BOUND, with_output_cap
from money.usage import positive_int
from policies.capabilities import ModelCapabilities, logprob_fields
from policies.request_defaults import RequestDefaults, merge_request_defaults
from policies.schema import ScorerSpec


def scored_stage_body(
    request: ParsedRequest, config: ModelConfig, scorer: ScorerSpec, *, stream: bool = False
) -> bytes:
    """A scored stage's upstream body: logprobs asked for a logprob scorer, never for a black-box
    one (its score comes from extra calls, and the scored model may give no logprobs). ``stream``:
    requested streamed (a model with a first-token deadline, gateway.streaming.first_token)."""
    top_k = None if scorer.is_blackbox else scorer.top_k
    return stage_body(request, config, top_k=top_k, stream=stream)


def stage_body(request: ParsedRequest, config: ModelConfig, *, top_k: int | None, stream: bool) -> bytes:
    """The upstream body of a stage of ``config``'s model: ``top_k`` alternatives per token asked
    (None: no logprobs of a scorer's; a final stage relayed live, a ``fallback`` tier's stage),
    over its request defaults and capabilities, with its default completion cap."""
    return upstream_body(
        request,
        config.model,
        top_k=top_k,
        stream=stream,
        defaults=config.request_defaults,
        capabilities=config.capabilities,
        default_cap=config.default_max_tokens,
    )


def upstream_body(
    request: ParsedRequest,
    upstream_model: str,
    *,
    top_k: int | None,
    stream: bool,
    defaults: RequestDefaults | None = None,
    capabilities: ModelCapabilities | None = None,
    default_cap: int = DEFAULT_COMPLETION_BOUND,
) -> bytes:
    """The upstream request: the client's fields over the model's defaults, ``model`` rewritten,
    logprobs added when scored.

    ``top_k`` set = a scored stage (non-streamed, asks for at least K alternatives).
    ``stream`` = the stage is streamed to the client (usage requested so the cost is known).
    ``capabilities`` (the model's declared ones; None = the defaults): logprobs are asked in the
    model's form and within its cap, the client's own request for them too; a model without
    logprobs is sent no logprobs field at all (some APIs refuse a request carrying them).
    Every request carries an explicit completion cap (``money.charges.with_output_cap``: the
    client's, else the defaults', else ``default_cap``): the one its reservation assumed.
    """
    body = merge_request_defaults(request.body, defaults, chat=request.api == "chat")
    with_output_cap(body, default_cap)
    body["model"] = upstream_model
    chat = request.api == "chat"
    asked = positive_int(request.body.get("top_logprobs" if chat else "logprobs"))
    if top_k is not None:
        wanted: int | None = max(top_k, asked)
    elif capabilities is not None and _needs_reshaping(request, capabilities, asked):
        wanted = asked  # the client's own request, in the form and within the cap the model takes
    else:
        wanted = None
    if wanted is not None:
        body.pop("logprobs", None)
        body.pop("top_logprobs", None)
        body.update(logprob_fields(capabilities or _DEFAULT_CAPABILITIES, wanted, chat=chat))
    elif capabilities is not None and not capabilities.logprobs:
        body.pop("logprobs", None)
        body.pop("top_logprobs", None)
    if stream:
        body["stream"] = True
        body["stream_options"] = {"include_usage": True}
    else:
        body.pop("stream", None)
        body.pop("stream_options", None)
    return orjson.dumps(body)


_DEFAULT_CAPABILITIES = ModelCapabilities()


def _needs_reshaping(request: ParsedRequest, capabilities: ModelCapabilities, asked: int) -> bool:
    """Whether the client's own request for logprobs must be rewritten for this model: it asks
    more alternatives than the model's cap, or asks on chat a model taking the integer form."""
    value = request.body.get("logprobs")
    chat = request.api == "chat"
    if chat and value is not True:
        return False
    if not chat and (value is None or value is False):
        return False
    cap = capabilities.max_top_logprobs
    return (cap is not None and asked > cap) or (chat and capabilities.logprobs_form == "integer")


def client_body(body: dict[str, Any], model_name: str, request: ParsedRequest) -> dict[str, Any]:
    """The client's view of an upstream answer: configured model name, logprobs only if asked (trimmed).

    Without logprobs it returns a new top-level dict and leaves ``body`` intact: the caller still
    holds ``body``, so the big logprob tree is freed after the response is sent, not before.
    """
    choices = body.get("choices")
    if not isinstance(choices, list):
        return {**body, "model": model_name}
    if not request.wants_logprobs:
        stripped = [
            {**choice, "logprobs": None}
            if isinstance(choice, dict) and choice.get("logprobs") is not None
            else choice
            for choice in choices
        ]
        return {**body, "model": model_name, "choices": stripped}
    body["model"] = model_name
    trim_alternatives(choices, request)
    return body


def trim_alternatives(choices: list[Any], request: ParsedRequest) -> None:
    """Cut alternatives down to what the client asked for (a scored stage may have asked more)."""
    wanted = positive_int(request.body.get("top_logprobs" if request.api == "chat" else "logprobs"))
    for choice in choices:
        logprobs = choice.get("logprobs") if isinstance(choice, dict) else None
        if not isinstance(logprobs, dict):
            continue
        for entry in logprobs.get("content") or ():
            tops = entry.get("top_logprobs") if isinstance(entry, dict) else None
            if isinstance(tops, list) and len(tops) > wanted:
                entry["top_logprobs"] = tops[:wanted]
        legacy = logprobs.get("top_logprobs")
        if isinstance(legacy, list):
            logprobs["top_logprobs"] = [_top_items(t, wanted) if isinstance(t, dict) else t for t in legacy]


def _top_items(alternatives: dict[str, Any], wanted: int) -> dict[str, Any]:
    def key(item: tuple[str, Any]) -> float:
        return -item[1] if isinstance(item[1], int | float) else 0.0

    return dict(sorted(alternatives.items(), key=key)[:wanted])
