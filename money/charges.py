"""What an upstream call is charged and what a request may cost at most: the one charging rule.

Every path that spends calls these functions: the spend reservation of a client request and its
settlement (gateway.assembly.runtime, gateway.engine.cascade), a live stream however it ends
(gateway.streaming.live), the
traffic sampler's shadow calls and their budget (gateway.learning.shadow) and the ``llm`` judge
(traffic.judges.llm). The rule is stated in docs/contracts.md#charges.

**The worst case of one call** (``call_bound``), from the request it sends:

* prompt tokens: one per byte of the request (a token encodes at least one byte of its text, and
  the JSON around the text covers a chat template's markers), plus ``TEMPLATE_TOKENS`` when the
  request carries ``tools``, ``functions`` or ``response_format`` (a template may wrap those in a
  fixed preamble of its own);
* completion tokens: the largest completion cap the upstream may honour (``completion_bound``;
  when none is set, or one is set to no positive number, ``DEFAULT_COMPLETION_BOUND``), for every
  generated choice (``max(n, best_of)``) of every prompt (a legacy completion's ``prompt`` may be
  a list: each item is a separate completion);
* the price of those tokens, or the flat ``per_query_usd`` when it is larger (it is what a call
  without usage is charged).

**The charge of one call** (``call_charge``), once it was accepted:

* the upstream's ``usage`` when it reports both counts as non-negative integers (a JSON bool,
  float or string is no count), in either provider form, normalised by ``money.usage`` and
  priced part by part (cache reads, cache writes, reasoning: ``Price.usage_cost_usd``); a live
  stream's completion is never charged below the output chunks the gateway read;
* otherwise the flat ``per_query_usd`` when the price has one (when it also has per-token prices,
  the larger of the flat price and the estimate below);
* otherwise an estimate that errs high: the prompt at its bound above, the completion at what was
  seen of the answer (a whole answer: the smaller of the completion bound and the bytes of its
  ``choices``; a stream: one token per output chunk read).

**Every attempt** (``Attempt``, ``attempt_charge``): an upstream client reports each attempt it
made, and every attempt that may have been billed is charged by the rule above: its answer's usage
when one was read, else the worst case of what it sent. Only an attempt that provably was not
served is free: one that failed before its request was sent (connection refused), or one the
upstream answered with an error status (an error carries no completion and no usage).

**A stream the gateway cancelled itself** (``Attempt.cancelled``: a ``prefix`` tier's rejected
cheap stage) carries no usage either; what the provider generated is the chunks read plus what it
wrote before the close reached it. Its worst case is therefore bounded by what the model declares
(``CallLimits.cancel_overrun_tokens``): the prompt at its bound and the chunks read plus that many
tokens per generated choice, within the cap sent. A model declaring nothing is charged the
call's worst case, as any stream that broke off without usage.

**The cap reserved is the cap sent** (``with_output_cap``): a request is sent with the completion
cap its bound assumed, the model's ``default_cap`` when neither the client nor the model's request
defaults set a positive one, and each content part priced by something other than bytes (an image,
audio, a file) is bounded by the model's declared ``part_tokens`` (``CallLimits``); a request with
a part its model declares no bound for is refused before any call (``undeclared_part``).

**Content parts are an allowlist** (``CHAT_PARTS``): a part is text, priced by its bytes, or of a
kind a model declares a bound for; a part of any other type (one an upstream may take and bill, as
vLLM takes ``audio_url``, or one an API adds later) is ``UNPRICED``: no bound can be declared for
it, and a request carrying one is refused before any call (``unpriced_part`` says where).

Only the contract package's dependencies are used, so the gateway and traffic/ both import it.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Any

import orjson

from money.prices import Price
from money.usage import normalize_usage

# Money kept as an integer (spend counters, reservations, the shadow budget) is in nano-USD: no
# float drift in running totals, and a cent is 10^7 units.
NANO_PER_USD = 1_000_000_000
# Completion tokens assumed per choice for a request that sets no cap.
DEFAULT_COMPLETION_BOUND = 4096
# Fields an OpenAI-compatible upstream may read as the completion-token cap (llama.cpp reads
# n_predict before max_tokens), and the fields that multiply the choices generated and billed.
COMPLETION_CAP_FIELDS = ("max_completion_tokens", "max_tokens", "n_predict")
CHOICE_FIELDS = ("n", "best_of")
# Request fields a chat template may wrap in a fixed preamble (tool-use instructions, a schema's
# framing) that the request's bytes do not contain; each such request's prompt bound adds this many.
TEMPLATE_FIELDS = ("tools", "functions", "response_format")
TEMPLATE_TOKENS = 1024
# Bytes the gateway may add to a client's request when it sends it upstream, beyond the upstream
# model id (rewritten ``model``): the completion cap, ``stream_options``, ``logprobs`` and
# ``top_logprobs``. A reservation counts them, so that the worst case charged for an attempt (of
# the request as sent) never exceeds what was reserved for it.
SENT_FIELDS_BYTES = 160
# The field a completion cap is sent under when the request sets none: chat and legacy completions
# take it on OpenAI (non-reasoning models), vLLM and llama.cpp (an alias of n_predict there).
SENT_CAP_FIELD = "max_tokens"
# Every chat content part type the gateway forwards, by how a provider prices it: None, by its
# bytes (text, an assistant's refusal); else the kind of part a model declares a bound for, priced
# by something other than its bytes (an image by its pixels, audio by its length, a file by its
# pages). The one list of the part types that exist: every API edge translates into these.
CHAT_PARTS: Mapping[str, str | None] = MappingProxyType(
    {"text": None, "refusal": None, "image_url": "image", "input_audio": "audio", "file": "file"}
)
PRICED_PARTS = {part_type: kind for part_type, kind in CHAT_PARTS.items() if kind is not None}
PART_KINDS = ("image", "audio", "file")
# The kind of a part of any other type, of no type, or that is no object: no model can declare a
# bound for it (it is not in ``PART_KINDS``), so a request carrying one is refused.
UNPRICED = "unpriced"


@dataclass(frozen=True, slots=True)
class CallLimits:
    """What one model declares to bound its calls beyond the bytes of a request.

    ``default_cap``: the completion cap sent, and assumed, when a request sets no positive one.
    ``part_tokens``: prompt tokens one content part of a kind (``PART_KINDS``) may be billed; a
    kind absent from it has no bound, and a request carrying such a part is refused.
    """

    default_cap: int = DEFAULT_COMPLETION_BOUND
    part_tokens: Mapping[str, int] = field(default_factory=lambda: MappingProxyType({}))
    # Completion tokens a stream the gateway cancels may be billed past the chunks it read, per
    # generated choice (None: undeclared, such a stream is charged its worst case).
    cancel_overrun_tokens: int | None = None


DEFAULT_LIMITS = CallLimits()


@dataclass(slots=True)  # not frozen: one is made per upstream call, on the request path
class Attempt:
    """One upstream attempt, as the charging rule sees it.

    ``sent``: the request body as sent. ``billable``: it may have been billed; False only for an
    attempt that provably was not served (never sent, or answered with an error status).
    ``answer``: the JSON object read as the answer of a non-streamed call (None: none was read);
    ``usage`` and ``streamed_tokens``: what a live stream delivered (its last ``usage`` object and
    its output chunks). ``cancelled``: the gateway closed the stream itself after reading
    ``streamed_tokens`` chunks (see ``cancelled_stream_charge``).
    """

    sent: bytes
    billable: bool = True
    answer: Any = None
    usage: Any = None
    streamed_tokens: int | None = None
    cancelled: bool = False


@dataclass(frozen=True, slots=True)
class Charge:
    """What one call is charged: USD and the token counts it was priced by (0, 0 when the flat
    price was charged)."""

    usd: float
    prompt_tokens: int
    completion_tokens: int
    # Parts of the counts above that the upstream reported (money.usage): 0 when not reported.
    cache_read_tokens: int = 0
    cache_write_tokens: int = 0
    reasoning_tokens: int = 0
    # Charged without a reported usage (``estimated_charge``): what it may have cost at most, not a
    # bill. Not compared: two charges of the same amount and counts are the same charge.
    bound: bool = field(default=False, compare=False)


# -- the worst case -------------------------------------------------------------------------------


def completion_bound(body: dict[str, Any], default: int = DEFAULT_COMPLETION_BOUND) -> int:
    """Completion tokens one choice may take: the largest cap ``body`` sets under any name the
    upstream may honour (a fractional one rounded up), or ``DEFAULT_COMPLETION_BOUND`` when it sets
    none. A cap field that is set but is no positive number (``n_predict: -1`` is "unbounded" to
    llama.cpp, which reads it before ``max_tokens``) counts as no cap: the default bound then
    applies too."""
    bound, unbounded = 0, False
    for name in COMPLETION_CAP_FIELDS:
        value = body.get(name)
        if value is not None:
            cap = _positive_count(value)
            if cap is None:
                unbounded = True
            elif cap > bound:
                bound = cap
    return max(bound, default) if unbounded or not bound else bound


def output_cap(body: dict[str, Any], default_cap: int = DEFAULT_COMPLETION_BOUND) -> int:
    """The completion cap ``with_output_cap`` sends for ``body``: the largest positive cap it sets
    under any name the upstream may honour (a fractional one rounded up), else ``default_cap``."""
    bound = 0
    for name in COMPLETION_CAP_FIELDS:
        value = body.get(name)
        if value is not None:
            cap = _positive_count(value)
            if cap is not None and cap > bound:
                bound = cap
    return bound or default_cap


def with_output_cap(body: dict[str, Any], default_cap: int = DEFAULT_COMPLETION_BOUND) -> dict[str, Any]:
    """``body`` (changed in place) as it is sent upstream, with an explicit completion cap: a cap
    field set to no positive number is dropped (``n_predict: -1`` is unbounded to llama.cpp, which
    reads it first), and ``SENT_CAP_FIELD: default_cap`` is added when no cap is left. Its
    ``completion_bound`` is then ``output_cap`` of the body it was given: what was reserved."""
    capped = False
    for name in COMPLETION_CAP_FIELDS:
        if name in body:
            if _positive_count(body[name]) is not None:
                capped = True
            else:
                del body[name]
    if not capped:
        body[SENT_CAP_FIELD] = default_cap
    return body


def part_kind(part: object) -> str | None:
    """How a chat content part is priced (``CHAT_PARTS``): None for text (by its bytes; a bare
    string in a content array is text too), the kind of a priced part, else ``UNPRICED``."""
    if isinstance(part, dict):
        part_type = part.get("type")
        return CHAT_PARTS.get(part_type, UNPRICED) if isinstance(part_type, str) else UNPRICED
    return None if isinstance(part, str) else UNPRICED


def part_counts(body: dict[str, Any]) -> dict[str, int]:
    """Content parts of each priced kind in a chat body's messages (empty for text only), those of
    a type no price is known for counted under ``UNPRICED`` (as is a content that is one object)."""
    counts: dict[str, int] = {}
    messages = body.get("messages")
    if not isinstance(messages, list):
        return counts
    for message in messages:
        content = message.get("content") if isinstance(message, dict) else None
        if isinstance(content, str):  # text, the common case: nothing more to look at
            continue
        if isinstance(content, list):
            for part in content:
                kind = part_kind(part)
                if kind is not None:
                    counts[kind] = counts.get(kind, 0) + 1
        elif isinstance(content, dict):  # one part, not in an array: a server may read it as one
            counts[UNPRICED] = counts.get(UNPRICED, 0) + 1
    return counts


def unpriced_part(body: dict[str, Any]) -> tuple[str, str] | None:
    """(where, its type) of the first ``UNPRICED`` content part of a chat body, None if it has none
    (the refusal's words: ``part_counts`` says whether there is one)."""
    messages = body.get("messages")
    for index, message in enumerate(messages if isinstance(messages, list) else ()):
        content = message.get("content") if isinstance(message, dict) else None
        where = f"messages[{index}].content"
        if isinstance(content, list):
            for number, part in enumerate(content):
                if part_kind(part) == UNPRICED:
                    return f"{where}[{number}]", _type_name(part)
        elif isinstance(content, dict):  # one part, not in an array
            return where, _type_name(content)
    return None


def _type_name(part: object) -> str:
    part_type = part.get("type") if isinstance(part, dict) else None
    return part_type if isinstance(part_type, str) else f"(none: {type(part).__name__})"


def undeclared_part(body: dict[str, Any], limits: CallLimits) -> str | None:
    """The first kind of content part ``body`` carries that ``limits`` declares no bound for."""
    for kind in part_counts(body):
        if kind not in limits.part_tokens:
            return kind
    return None


def part_tokens_bound(body: dict[str, Any], limits: CallLimits) -> int:
    """Prompt tokens the priced content parts of ``body`` may be billed beyond their bytes."""
    if not limits.part_tokens:
        return 0
    return sum(count * limits.part_tokens.get(kind, 0) for kind, count in part_counts(body).items())


def generated_choices(body: dict[str, Any]) -> int:
    """Choices the upstream generates and bills per prompt: ``max(n, best_of)``, at least 1."""
    choices = 1
    for name in CHOICE_FIELDS:
        value = body.get(name)
        if value is not None:
            count = _positive_count(value)
            if count is not None and count > choices:
                choices = count
    return choices


def prompt_count(body: dict[str, Any]) -> int:
    """Separate completions a request's ``prompt`` asks for: one per string or token array of a
    list, one for a string or a single token array (and for a chat request)."""
    prompt = body.get("prompt")
    if not isinstance(prompt, list):
        return 1
    # A list of token ids is one prompt; a list of strings or of token arrays is one per item
    # (a mixed list counts its strings and arrays: no server makes more completions of it).
    return max(1, sum(1 for item in prompt if isinstance(item, str | list)))


def completion_tokens_bound(body: dict[str, Any], limits: CallLimits = DEFAULT_LIMITS) -> int:
    """Completion tokens a request may be billed: the cap, per generated choice, per prompt."""
    return completion_bound(body, limits.default_cap) * generated_choices(body) * prompt_count(body)


def prompt_tokens_bound(body: dict[str, Any], prompt_bytes: int, limits: CallLimits = DEFAULT_LIMITS) -> int:
    """Prompt tokens a request may be billed: ``prompt_bytes`` (the bytes of the request, and of
    anything added to its prompt) plus ``TEMPLATE_TOKENS`` if it has a field a template wraps,
    plus the declared bound of each priced content part (``part_tokens_bound``)."""
    bound = prompt_bytes + part_tokens_bound(body, limits)
    for name in TEMPLATE_FIELDS:
        if body.get(name):
            return bound + TEMPLATE_TOKENS
    return bound


def tokens_bound(
    body: dict[str, Any], prompt_bytes: int, limits: CallLimits = DEFAULT_LIMITS
) -> tuple[int, int]:
    """(prompt, completion) tokens a request may be billed (``prompt_tokens_bound``,
    ``completion_tokens_bound``)."""
    return prompt_tokens_bound(body, prompt_bytes, limits), completion_tokens_bound(body, limits)


def sending_tokens_bound(
    body: dict[str, Any], prompt_bytes: int, limits: CallLimits = DEFAULT_LIMITS
) -> tuple[int, int]:
    """``tokens_bound`` of ``body`` as ``with_output_cap`` will send it, without copying it: its
    completion cap is ``output_cap`` (what is reserved is what is sent)."""
    completion = output_cap(body, limits.default_cap) * generated_choices(body) * prompt_count(body)
    return prompt_tokens_bound(body, prompt_bytes, limits), completion


def bound_usd(price: Price, prompt_tokens: int, completion_tokens: int) -> float:
    """Worst case of a call of at most these tokens: their price, or the flat price when larger."""
    by_tokens = price.bound_cost_usd(prompt_tokens, completion_tokens) if price.has_token_prices else 0.0
    return max(by_tokens, price.per_query_usd or 0.0)


def call_bound(
    price: Price, body: dict[str, Any], prompt_bytes: int, limits: CallLimits = DEFAULT_LIMITS
) -> Charge:
    """The worst case of sending ``body`` (``prompt_bytes``: its size plus any prompt added to it):
    USD and the token bounds it prices."""
    prompt, completion = tokens_bound(body, prompt_bytes, limits)
    return Charge(bound_usd(price, prompt, completion), prompt, completion)


def sent_bound(price: Price, sent: bytes, limits: CallLimits = DEFAULT_LIMITS) -> Charge:
    """``call_bound`` of an upstream request as sent (its JSON bytes)."""
    return call_bound(price, orjson.loads(sent), len(sent), limits)


# -- the charge -----------------------------------------------------------------------------------


def reported_counts(usage: Any) -> tuple[int, int] | None:
    """(prompt_tokens, completion_tokens) when ``usage`` reports both as non-negative integers (in
    either provider form, ``money.usage``; the prompt total includes cached input), else None (a
    missing count, a bool, a float or a string is no count)."""
    counts = normalize_usage(usage)
    return (counts.prompt_tokens, counts.completion_tokens) if counts is not None else None


def call_charge(
    price: Price,
    usage: Any,
    sent: bytes,
    *,
    answer: Any = None,
    streamed_tokens: int | None = None,
    limits: CallLimits = DEFAULT_LIMITS,
) -> Charge:
    """What one accepted call is charged (see the module docstring).

    ``sent``: the upstream request body as sent. What was seen of the answer: ``answer``, the whole
    answer (a JSON object) of a non-streamed call, or ``streamed_tokens``, the output chunks a live
    stream delivered (one token each). With neither (nothing was read), the estimate is the
    call's worst case.
    """
    counts = normalize_usage(usage)
    if counts is not None:
        if streamed_tokens is not None and streamed_tokens > counts.completion_tokens:
            counts = counts.with_completion(streamed_tokens)
        return Charge(
            price.usage_cost_usd(counts),
            counts.prompt_tokens,
            counts.completion_tokens,
            counts.cache_read_tokens,
            counts.cache_write_tokens + counts.cache_write_1h_tokens,
            counts.reasoning_tokens,
        )
    if not price.has_token_prices:
        return estimated_charge(price, 0, 0)  # the flat price, whatever the tokens
    request = orjson.loads(sent)
    prompt = prompt_tokens_bound(request, len(sent), limits)
    if streamed_tokens is not None:
        completion = streamed_tokens
    else:
        completion = completion_tokens_bound(request, limits)
        choices = answer.get("choices") if isinstance(answer, dict) else None
        if choices is not None:
            # A token is at least one byte of what it encodes: the answer's bytes bound its tokens.
            completion = min(completion, len(orjson.dumps(choices)))
    return estimated_charge(price, prompt, completion)


def estimated_charge(price: Price, prompt_tokens: int, completion_tokens: int) -> Charge:
    """What a call without usage that may have used these tokens is charged: the flat price when
    the price has only that form, else the tokens' price, or the flat price when it is larger (an
    upstream billing by tokens is never charged less than it may have spent). It is marked
    ``bound``: no bill was read, so it says what the call may have cost at most."""
    flat = Charge(float(price.per_query_usd), 0, 0, bound=True) if price.per_query_usd is not None else None
    if flat is not None and not price.has_token_prices:
        return flat
    usd = float(price.cost_usd(prompt_tokens, completion_tokens))
    estimate = Charge(usd, prompt_tokens, completion_tokens, bound=True)
    return flat if flat is not None and flat.usd >= estimate.usd else estimate


NOT_BILLED = Charge(0.0, 0, 0)


def cancelled_stream_charge(
    price: Price,
    prompt_bytes: int,
    streamed_tokens: int,
    overrun_tokens: int | None,
    cap: int,
    *,
    extra_prompt_tokens: int = 0,
    choices: int = 1,
) -> Charge:
    """What a stream the gateway cancelled itself is charged when it read no usage, from numbers
    (module docstring): the prompt at its bound, one token per byte of the ``prompt_bytes`` sent plus
    ``extra_prompt_tokens`` (a template's preamble, priced content parts: ``prompt_tokens_bound``);
    the completion at the ``streamed_tokens`` chunks read plus the model's declared
    ``overrun_tokens`` per generated choice, within the completion ``cap`` per choice (``choices``:
    the choices generated for every prompt); a model declaring no overrun (None), the whole cap."""
    bound = cap * choices
    completion = bound if overrun_tokens is None else min(bound, streamed_tokens + overrun_tokens * choices)
    return estimated_charge(price, prompt_bytes + extra_prompt_tokens, completion)


def total_charge(charges: Sequence[Charge]) -> Charge:
    """The charges of several attempts of one call as one: every amount and count summed."""
    if len(charges) == 1:
        return charges[0]
    return Charge(
        sum(c.usd for c in charges),
        sum(c.prompt_tokens for c in charges),
        sum(c.completion_tokens for c in charges),
        sum(c.cache_read_tokens for c in charges),
        sum(c.cache_write_tokens for c in charges),
        sum(c.reasoning_tokens for c in charges),
    )


def attempt_charge(price: Price, attempt: Attempt, limits: CallLimits = DEFAULT_LIMITS) -> Charge:
    """What one upstream attempt is charged: nothing when it provably was not served, else
    ``call_charge`` of what was read of it (the usage of its answer or stream; with nothing read,
    a timeout, a cut body or a dropped connection, its worst case); a stream the gateway cancelled
    without usage, ``cancelled_stream_charge`` of the request it sent."""
    if not attempt.billable:
        return NOT_BILLED
    usage = attempt.usage
    if usage is None and isinstance(attempt.answer, dict):
        usage = attempt.answer.get("usage")
    streamed = attempt.streamed_tokens
    if attempt.cancelled and streamed is not None and normalize_usage(usage) is None:
        request = orjson.loads(attempt.sent)
        return cancelled_stream_charge(
            price,
            len(attempt.sent),
            streamed,
            limits.cancel_overrun_tokens,
            completion_bound(request, limits.default_cap),
            extra_prompt_tokens=prompt_tokens_bound(request, 0, limits),
            choices=generated_choices(request) * prompt_count(request),
        )
    return call_charge(
        price,
        usage,
        attempt.sent,
        answer=attempt.answer,
        streamed_tokens=streamed,
        limits=limits,
    )


def _positive_count(value: object) -> int | None:
    """An integer count from a JSON number (rounded up), or None when it is not a positive number."""
    if type(value) is int:  # the common case first
        return value if value > 0 else None
    if isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value):
        return None
    count = math.ceil(value)
    return count if count > 0 else None
