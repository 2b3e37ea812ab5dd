"""The fail-over scenarios: how a primary model fails, scripted on the scripted upstream.

A scenario scripts the upstream (tests/support/scripted_upstream.py) so that the primary
(``small`` -> ``up-small``) fails one way while the fallback (``large`` -> ``up-large``) answers,
and says which config the gateway serving it needs (small timeouts: a scenario never waits the
real defaults). tests/support/failover_suite.py runs each scenario on chat, Responses and Messages,
streamed and not, and judges every cell; tests/gateway/test_failover_suite.py and
bench/gateway/failover_table.py run the table.

Every reply is metered (``usage_report``: its usage is what the provider bills, its text cut at the
cap the request sends) and the fault matrix's prices (tests/support/fault_matrix.py) price the bills.
The primary's answer is ``PRIMARY_TOKENS`` distinct words, so that a cut answer is told from a
whole one by its text alone.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from tests.support.scripted_upstream import Reply, ScriptedUpstream

PRIMARY, FALLBACK = "up-small", "up-large"
PRIMARY_TOKENS = 60
CUT_AFTER_TOKENS = 40  # the stream cut after 40 of 60 tokens
STALL_AFTER_TOKENS = 20  # the stream that stalls after 20 tokens
MALFORMED_AT_TOKEN = 10
PRIMARY_TEXT = " ".join(f"w{i}" for i in range(1, PRIMARY_TOKENS + 1))
FALLBACK_TEXT = "Paris is the capital of France, says the fallback."
WHOLE_ANSWERS = {PRIMARY_TEXT: "small", FALLBACK_TEXT: "large"}
# The scenario config's deadlines: every model's call, the primary's first token, the request.
MODEL_TIMEOUT_S = 0.6
FIRST_TOKEN_TIMEOUT_S = 0.25
REQUEST_TIMEOUT_S = 3.0
STALL_S = 5.0  # a silent or stalled upstream waits this long, far past every deadline above
RETRY_AFTER_S = 0.05
STEADY_REQUESTS = 6  # requests per cell of the steady-traffic scenario
BREAKER_FAILURES = 2
ROLE_CHUNKS = 1  # a chat stream's first chunk carries the role, no token


Script = Callable[[ScriptedUpstream, threading.Event], None]


def answer(content: str = PRIMARY_TEXT, **changes: Any) -> Reply:
    """A whole metered answer of ``content`` (confident: a cascade stage accepts it)."""
    return Reply(content=content, confidence=0.99, usage_report="exact", **changes)


def refusal(status: int, code: str, **changes: Any) -> Reply:
    """A provider's 4xx refusal in OpenAI's words (``code`` the machine-readable reason)."""
    error = {"message": f"refused: {code}", "type": "invalid_request_error", "param": None, "code": code}
    return Reply(status=status, body={"error": error}, **changes)


def provider_error(status: int, retry_after: float | None = None) -> Reply:
    """A 429 or 5xx, with ``Retry-After`` when given."""
    headers = {"Retry-After": str(retry_after)} if retry_after is not None else {}
    return Reply(status=status, headers=headers)


@dataclass(frozen=True, eq=False)  # one object per scenario: hashed by identity
class Scenario:
    """One way the primary fails.

    Attributes:
        name: the table's row.
        script: scripts the upstream (the event is set when the cell ends: a held reply's release).
        expect: what the fail-over code gives: ``answer`` (a whole answer), ``error`` (a clean
            error in the API's shape) or ``either``.
        expect_streamed: ``expect`` of the streamed cells where it differs (a ``fallback`` tier
            relays a stream live: a stream broken after its first byte ends with the API's error
            event, unless the next model can finish it).
        served_by: the model whose answer the fail-over code serves (``small``: the primary
            after a retry; ``large``: the fallback), where ``expect`` is ``answer``.
        tier: ``reliable`` (the ``fallback`` mechanism: primary -> fallback, relayed live when
            streamed), ``cascade`` (the calibrated cascade small -> large: a streamed cheap answer
            is read whole and scored before the client's first byte) or ``prefix`` (that cascade
            committing a streamed cheap answer on its first tokens).
        streamed_only: the scenario exists only for streamed requests.
        requests: requests per cell (steady traffic: the breaker's scenario).
        models: changes to the models' config (by model name).
        config: changes to the top-level config.
    """

    name: str
    script: Script
    expect: str = "answer"
    expect_streamed: str | None = None
    served_by: str = "large"
    tier: str = "reliable"
    streamed_only: bool = False
    requests: int = 1
    models: dict[str, dict[str, Any]] = field(default_factory=dict)
    config: dict[str, Any] = field(default_factory=dict)


def _primary(
    *replies: Reply, default: Reply | None = None
) -> Callable[[ScriptedUpstream, threading.Event], None]:
    """A script: the primary meets ``replies`` in turn, then ``default`` (a whole answer)."""

    def script(upstream: ScriptedUpstream, released: threading.Event) -> None:
        upstream.set_default(FALLBACK, answer(FALLBACK_TEXT))
        upstream.set_default(PRIMARY, default or answer())
        upstream.script(PRIMARY, *replies)

    return script


def _late_first_token(upstream: ScriptedUpstream, released: threading.Event) -> None:
    """The primary's first token (or whole answer) waits for the cell's end."""
    upstream.set_default(FALLBACK, answer(FALLBACK_TEXT))
    upstream.set_default(PRIMARY, answer(hold_first=released))


def _both_down(upstream: ScriptedUpstream, released: threading.Event) -> None:
    upstream.set_default(PRIMARY, provider_error(503))
    upstream.set_default(FALLBACK, provider_error(503))


# A whole answer cut (its body at a byte count inside the content) or a stream cut after its 40th token.
_CUT = answer(break_stream_after=ROLE_CHUNKS + CUT_AFTER_TOKENS, cut_body_at=200)
_STALL = answer(stall_body_s=STALL_S, stall_at_chunk=ROLE_CHUNKS + STALL_AFTER_TOKENS)
_PREFIX_TIER_MODELS = {"small": {"cancel_overrun_tokens": 16}}
# The same with a fallback that declares it can continue an assistant message (llama-server's
# prefill): a committed stream that breaks is finished by it (gateway.streaming.stream_finish).
_FINISHING_MODELS = {**_PREFIX_TIER_MODELS, "large": {"capabilities": {"continue_assistant": True}}}


def _finished_by_fallback(broken: Reply) -> Script:
    """The primary breaks as ``broken`` after its 40th or 20th token; the fallback, asked to continue
    the text sent, answers the rest of the primary's words: the client's whole text is then the
    primary's whole answer."""
    sent = CUT_AFTER_TOKENS if broken.break_stream_after is not None else STALL_AFTER_TOKENS
    rest = "".join(f" w{i}" for i in range(sent + 1, PRIMARY_TOKENS + 1))

    def script(upstream: ScriptedUpstream, released: threading.Event) -> None:
        upstream.set_default(FALLBACK, answer(rest))
        upstream.set_default(PRIMARY, broken)

    return script


SCENARIOS: tuple[Scenario, ...] = (
    Scenario("429 + Retry-After, once", _primary(provider_error(429, RETRY_AFTER_S)), served_by="small"),
    Scenario("429 no Retry-After, for good", _primary(default=provider_error(429))),
    Scenario("500 once", _primary(provider_error(500)), served_by="small"),
    Scenario("503 for good", _primary(default=provider_error(503))),
    Scenario("reset before headers, once", _primary(Reply(drop_connection=True)), served_by="small"),
    Scenario("no answer (silent)", _primary(default=answer(delay_s=STALL_S))),
    Scenario("first token late", _late_first_token),
    Scenario("cut after 40 of 60 tokens", _primary(default=_CUT), expect_streamed="either"),
    Scenario("stall after 20 tokens", _primary(default=_STALL), expect_streamed="either"),
    Scenario("cut after 40 of 60, cascade tier", _primary(default=_CUT), tier="cascade"),
    Scenario("stall after 20, cascade tier", _primary(default=_STALL), tier="cascade"),
    Scenario(
        "malformed chunk",
        _primary(default=answer(garbage_at_chunk=ROLE_CHUNKS + MALFORMED_AT_TOKEN)),
        expect_streamed="either",
    ),
    Scenario("no [DONE]", _primary(default=answer(omit_done=True)), served_by="small"),
    Scenario("400 context_length_exceeded", _primary(default=refusal(400, "context_length_exceeded"))),
    Scenario(
        "400 content_policy_violation",
        _primary(default=refusal(400, "content_policy_violation")),
        expect="error",
    ),
    Scenario(
        "content policy, escalate",
        _primary(default=refusal(400, "content_policy_violation")),
        config={"upstream_errors": {"content_policy": "escalate"}},
    ),
    Scenario("primary and fallback down", _both_down, expect="error"),
    Scenario(
        "primary down, steady traffic",
        _primary(default=provider_error(503)),
        requests=STEADY_REQUESTS,
        models={"small": {"breaker": {"failures": BREAKER_FAILURES, "open_s": 60}}},
    ),
    Scenario(
        "prefix committed, then cut",
        _primary(default=_CUT),
        expect="either",
        tier="prefix",
        streamed_only=True,
        models=_PREFIX_TIER_MODELS,
    ),
    Scenario(
        "prefix committed, then stall",
        _primary(default=_STALL),
        expect="either",
        tier="prefix",
        streamed_only=True,
        models=_PREFIX_TIER_MODELS,
    ),
    Scenario(
        "prefix committed, then cut; the fallback continues",
        _finished_by_fallback(_CUT),
        tier="prefix",
        streamed_only=True,
        served_by="small",
        models=_FINISHING_MODELS,
    ),
    Scenario(
        "prefix committed, then stall; the fallback continues",
        _finished_by_fallback(_STALL),
        tier="prefix",
        streamed_only=True,
        served_by="small",
        models=_FINISHING_MODELS,
    ),
)
