"""What a client of the fail-over suite (tests/support/failover_suite.py) got: one request sent
through the official openai or anthropic SDK to the gateway in-process, judged.

``ask`` returns a ``Verdict``:

* ``answer (<model>)``: a whole answer, word for word one of the scripted answers
  (tests/support/failover_scenarios.py), with its final event (a finish reason,
  ``response.completed``, ``message_stop``);
* ``error <status> <code>``: an error response in the API's shape (the fault matrix's check,
  tests/support/fault_matrix.py), or ``error event <code>``: a stream that started and ended with
  the API's error event;

or a failure: ``TRUNCATED`` (a stream without its final event, an answer whose text is cut),
``HANG`` (no answer within the request deadline and a margin), ``500`` (an internal error, also
as an event), ``DROPPED`` (the connection broke under the client), ``BAD SHAPE``.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import anthropic
import httpx
import openai
import orjson

from tests.support import failover_scenarios as fs
from tests.support.fault_matrix import error_shape_problem
from tests.support.in_process_gateway import InProcessGateway

QUESTION = "What is the capital of France?"
MESSAGES = [{"role": "user", "content": QUESTION}]
MESSAGES_MAX_TOKENS = 256
HANG_MARGIN_S = 2.0  # past the request deadline, a client that has no answer has met a hang
FAILURES = ("TRUNCATED", "HANG", "500", "DROPPED", "BAD SHAPE", "UNDERCHARGED")


@dataclass
class Verdict:
    """What one request's client got: ``kind`` (``answer``, ``error``, or a failure of
    ``FAILURES``) and its detail."""

    kind: str
    detail: str
    request_id: str | None = None

    def __str__(self) -> str:
        return f"{self.kind} {self.detail}".strip() if self.kind in ("answer", "error") else self.kind

    @property
    def failed(self) -> bool:
        """Whether the client got neither a whole answer nor a clean error."""
        return self.kind in FAILURES


# -- the clients ------------------------------------------------------------------------------------


@dataclass
class Seen:
    """What a client saw of one request: its id, its text, whether its final event came."""

    request_id: str | None = None
    text: str = ""
    finished: bool = False
    started: bool = False  # a streamed response began (its headers came)


def _chat(gateway: InProcessGateway, tier: str, stream: bool, timeout_s: float, seen: Seen) -> None:
    client = gateway.client().with_options(timeout=timeout_s)
    raw = client.chat.completions.with_raw_response.create(
        model=f"cascade/{tier}", messages=MESSAGES, stream=stream
    )
    seen.request_id, seen.started = raw.headers.get("x-request-id"), stream
    if not stream:
        choice = raw.parse().choices[0]
        seen.text, seen.finished = choice.message.content or "", choice.finish_reason is not None
        return
    for chunk in raw.parse():
        for part in chunk.choices:
            seen.text += part.delta.content or ""
            seen.finished = seen.finished or part.finish_reason is not None


def _responses(gateway: InProcessGateway, tier: str, stream: bool, timeout_s: float, seen: Seen) -> None:
    client = gateway.client().with_options(timeout=timeout_s)
    raw = client.responses.with_raw_response.create(model=f"cascade/{tier}", input=QUESTION, stream=stream)
    seen.request_id, seen.started = raw.headers.get("x-request-id"), stream
    if not stream:
        response = raw.parse()
        seen.text, seen.finished = response.output_text, response.status == "completed"
        return
    for event in raw.parse():
        if event.type == "response.output_text.delta":
            seen.text += event.delta
        elif event.type == "response.completed":
            seen.finished = True
        elif event.type in ("error", "response.failed"):
            raise StreamError(_event_code(event))


def _messages(gateway: InProcessGateway, tier: str, stream: bool, timeout_s: float, seen: Seen) -> None:
    client = gateway.anthropic_client().with_options(timeout=timeout_s)
    raw = client.messages.with_raw_response.create(
        model=f"cascade/{tier}", max_tokens=MESSAGES_MAX_TOKENS, messages=MESSAGES, stream=stream
    )
    seen.request_id, seen.started = raw.headers.get("x-request-id"), stream
    if not stream:
        message = raw.parse()
        seen.text = "".join(getattr(block, "text", "") for block in message.content)
        seen.finished = message.stop_reason is not None
        return
    for event in raw.parse():
        if event.type == "content_block_delta":
            seen.text += getattr(event.delta, "text", "")
        elif event.type == "message_stop":
            seen.finished = True


CLIENTS = {"chat": _chat, "responses": _responses, "messages": _messages}


class StreamError(Exception):
    """A stream's error event, as the client read it."""


def _event_code(event: Any) -> str:
    """The code of a Responses error event (``error``, or ``response.failed``'s error)."""
    error = getattr(event, "response", None)
    error = getattr(error, "error", None) if error is not None else event
    return str(getattr(error, "code", None) or getattr(error, "message", "error"))


def ask(gateway: InProcessGateway, api: str, tier: str, stream: bool) -> Verdict:
    """Send a request to ``tier`` on ``api`` through its SDK and judge what came back (but its charge)."""
    seen = Seen()
    try:
        CLIENTS[api](gateway, tier, stream, fs.REQUEST_TIMEOUT_S + HANG_MARGIN_S, seen)
    except (openai.APITimeoutError, anthropic.APITimeoutError, httpx.TimeoutException):
        return Verdict("HANG", "", seen.request_id)
    except (openai.APIConnectionError, anthropic.APIConnectionError):
        return Verdict("DROPPED", "", seen.request_id)
    except (openai.APIStatusError, anthropic.APIStatusError) as exc:
        if seen.started or exc.response.status_code == 200:  # an error event inside a started stream
            return _error_event(exc, seen.request_id)
        return _error_response(api, exc.response)
    except (StreamError, openai.APIError, anthropic.APIError) as exc:
        return _error_event(exc, seen.request_id)
    except (httpx.HTTPError, ValueError) as exc:
        return Verdict("DROPPED", type(exc).__name__, seen.request_id)
    model = fs.WHOLE_ANSWERS.get(seen.text)
    if model is None or not seen.finished:
        return Verdict("TRUNCATED", "", seen.request_id)
    return Verdict("answer", f"({model})", seen.request_id)


def _error_response(api: str, response: httpx.Response) -> Verdict:
    request_id = response.headers.get("x-request-id")
    if response.status_code >= 500 and response.status_code not in (502, 503, 504):
        return Verdict("500", "", request_id)
    response.read()
    if error_shape_problem(api, response.status_code, response.content) is not None:
        return Verdict("BAD SHAPE", "", request_id)
    error = orjson.loads(response.content)["error"]
    code = error.get("code") or error.get("type")
    return Verdict("error", f"{response.status_code} {code}", request_id)


def _code_of(exc: Exception) -> str:
    """The code of a stream's error event as the SDK raised it (openai: ``code``; anthropic: the
    error object's ``type`` in ``body``; a Responses event: its code)."""
    if isinstance(exc, StreamError):
        return str(exc)
    body = getattr(exc, "body", None)
    if isinstance(body, dict) and isinstance(body.get("error"), dict):
        body = body["error"]
    code = getattr(exc, "code", None) or (
        body.get("code") or body.get("type") if isinstance(body, dict) else None
    )
    return str(code or "error")


def _error_event(exc: Exception, request_id: str | None) -> Verdict:
    """A started stream's error event: clean, or the gateway's internal error (a 500 in a stream)."""
    code = _code_of(exc)
    if code == "internal_error" or "internal error (request" in str(exc):
        return Verdict("500", "", request_id)
    return Verdict("error", f"event {code}", request_id)
