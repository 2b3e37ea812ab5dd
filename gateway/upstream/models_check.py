"""``cascade models check``: call each configured model once and compare what it returns about
logprobs with what the config declares (``models.*.capabilities``;
docs/serving.md#models-without-logprobs).

One small chat request per model asks for logprobs in the model's declared form, with
``top_logprobs`` = its declared ``max_top_logprobs`` or the check's K. An upstream that answers it
400/422 is asked again without the logprobs fields: the model is reachable and refuses them (as
OpenAI's reasoning models do). The report says, per model: reachable or not (and why), whether it
returned logprobs, how many alternatives per position it gave of the ones asked, whether it refused
the fields, the latency, what the calls cost (``money.charges``), and every way the declaration
disagrees with what was seen. The same check runs at ``cascade serve`` start when the config sets
``probe_capabilities``.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Iterable, Mapping
from dataclasses import asdict, dataclass, field
from typing import Any

import aiohttp
import orjson

from gateway.config.settings import ModelConfig, Settings
from money.charges import call_charge, sent_bound
from policies.capabilities import ModelCapabilities, logprob_fields
from policies.request_defaults import merge_request_defaults
from policies.scorers import legacy_to_content
from redaction import Redactor, redact_url

# Alternatives asked of a model that declares no cap: the most any scorer may read (ScorerSpec.top_k).
DEFAULT_TOP_K = 20
PROBE_MESSAGES = [{"role": "user", "content": "What is the capital of France? Answer in one word."}]
# A few tokens are enough to see logprobs; a reasoning model's default cap would spend far more.
PROBE_MAX_TOKENS = 16
_REFUSED_STATUS = frozenset({400, 422})
_ERROR_CHARS = 200


@dataclass(slots=True)
class Observed:
    """What one answer carried: positions with a logprob and the alternatives of each."""

    positions: int = 0
    alternatives: list[int] = field(default_factory=list)

    @classmethod
    def of(cls, answer: Any) -> Observed:
        """Read ``choices[0].logprobs`` of a chat answer, ``content`` entries or the legacy parallel
        lists (the shapes ``policies.score_response`` scores); nothing usable: 0 positions."""
        choices = answer.get("choices") if isinstance(answer, dict) else None
        first = choices[0] if isinstance(choices, list) and choices and isinstance(choices[0], dict) else {}
        logprobs = first.get("logprobs")
        content = logprobs.get("content") if isinstance(logprobs, dict) else None
        if isinstance(logprobs, dict) and content is None and "token_logprobs" in logprobs:
            content = legacy_to_content(logprobs)  # parallel lists, as some providers answer on chat
        seen = cls()
        for entry in content if isinstance(content, list) else ():
            if not isinstance(entry, dict) or not isinstance(entry.get("logprob"), int | float):
                continue
            seen.positions += 1
            tops = entry.get("top_logprobs")
            seen.alternatives.append(len(tops) if isinstance(tops, list) else 0)
        return seen


@dataclass(slots=True)
class ModelReport:
    """One model's check: what was asked, what came back, and how it compares with its declaration."""

    name: str
    upstream: str
    base_url: str
    declared: dict[str, Any]
    asked_alternatives: int
    reachable: bool = False
    logprobs: bool | None = None
    alternatives_min: int | None = None
    alternatives_max: int | None = None
    refused_logprobs: bool = False
    refusal: str | None = None  # the upstream's answer to the request with logprobs, when it refused it
    status: int | None = None
    latency_ms: float | None = None
    cost_usd: float = 0.0
    error: str | None = None
    disagreements: list[str] = field(default_factory=list)

    @property
    def agrees(self) -> bool:
        """Reachable, and everything seen matches the declared capabilities."""
        return self.reachable and not self.disagreements

    def as_dict(self) -> dict[str, Any]:
        """JSON-ready, with ``agrees``."""
        return {**asdict(self), "agrees": self.agrees}


def probe_body(config: ModelConfig, alternatives: int, *, with_logprobs: bool) -> bytes:
    """The check's request to ``config``'s model: a one-word question over its request defaults,
    asking ``alternatives`` per position in its declared form and cap (none: ``with_logprobs`` false).

    Logprobs are asked even of a model declared without them: the check is what tells.
    """
    defaults = config.request_defaults
    cap_field = (
        "max_completion_tokens" if defaults and "max_completion_tokens" in defaults.fields() else "max_tokens"
    )
    body = merge_request_defaults(
        {"messages": PROBE_MESSAGES, cap_field: PROBE_MAX_TOKENS, "temperature": 0}, defaults, chat=True
    )
    body["model"] = config.model
    if with_logprobs:
        declared = config.capabilities
        asking = ModelCapabilities(
            max_top_logprobs=declared.max_top_logprobs, logprobs_form=declared.logprobs_form
        )
        body.update(logprob_fields(asking, alternatives, chat=True))
    return orjson.dumps(body)


def compare(report: ModelReport, declared: ModelCapabilities) -> list[str]:
    """How what was seen disagrees with ``declared`` (empty: it agrees, or nothing was seen)."""
    if not report.reachable:
        return []
    if not declared.logprobs:
        if report.logprobs:
            return [
                f"returns logprobs ({report.alternatives_max} alternatives per position) but is declared "
                "logprobs: false"
            ]
        return []
    if report.refused_logprobs:
        return [
            f"refused the logprobs fields ({report.refusal}); declare logprobs: false, or the "
            "form (logprobs_form) or cap (max_top_logprobs) it takes"
        ]
    if not report.logprobs:
        return ["returned no logprobs; declare logprobs: false"]
    given = report.alternatives_max or 0
    if given < report.asked_alternatives:
        return [
            f"gave {given} alternatives per position of the {report.asked_alternatives} asked; "
            f"declare max_top_logprobs: {given}"
        ]
    return []


async def _post(
    session: aiohttp.ClientSession, config: ModelConfig, body: bytes
) -> tuple[int, Any, bytes, float]:
    """POST the chat request: (status, parsed JSON or None, raw body, seconds)."""
    headers = {"Content-Type": "application/json"}
    key = config.api_key()
    if key:
        headers["Authorization"] = f"Bearer {key}"
    started = time.perf_counter()
    timeout = aiohttp.ClientTimeout(total=config.timeout_s)
    async with session.post(
        config.base_url + "/chat/completions",
        data=body,
        headers=headers,
        timeout=timeout,
        allow_redirects=False,
    ) as response:
        raw = await response.read()
        seconds = time.perf_counter() - started
    try:
        parsed = orjson.loads(raw)
    except orjson.JSONDecodeError:
        parsed = None
    return response.status, parsed, raw, seconds


async def check_model(
    session: aiohttp.ClientSession, name: str, config: ModelConfig, top_k: int, redact: Redactor
) -> ModelReport:
    """Call ``config``'s model once (twice if it refuses the logprobs fields) and report."""
    declared = config.capabilities
    asked = declared.alternatives(top_k)
    report = ModelReport(
        name, config.model, redact_url(config.base_url), declared.model_dump(), asked_alternatives=asked
    )
    body = probe_body(config, asked, with_logprobs=True)
    try:
        status, answer, raw, seconds = await _post(session, config, body)
        if status in _REFUSED_STATUS:
            report.refused_logprobs = True
            report.refusal = _error_text(status, raw, redact)
            body = probe_body(config, asked, with_logprobs=False)
            status, answer, raw, seconds = await _post(session, config, body)
    except (aiohttp.ClientError, OSError, TimeoutError) as exc:
        report.cost_usd += sent_bound(config.price, body).usd  # it may have answered, unseen
        report.error = redact(f"{type(exc).__name__}: {' '.join(str(exc).split())}")[:_ERROR_CHARS]
        return report
    report.status, report.latency_ms = status, round(seconds * 1000, 1)
    if status != 200 or not isinstance(answer, dict):
        report.refused_logprobs, report.refusal = False, None  # refused with or without logprobs
        report.error = _error_text(status, raw, redact)
        return report
    report.reachable = True
    report.cost_usd += call_charge(config.price, answer.get("usage"), body, answer=answer).usd
    seen = Observed.of(answer)
    report.logprobs = seen.positions > 0
    if seen.alternatives:
        report.alternatives_min, report.alternatives_max = min(seen.alternatives), max(seen.alternatives)
    report.disagreements = compare(report, declared)
    return report


async def check_models(
    settings: Settings, names: Iterable[str] | None = None, top_k: int = DEFAULT_TOP_K
) -> list[ModelReport]:
    """Check the named models of ``settings`` (all by default), one after the other."""
    selected: Mapping[str, ModelConfig] = settings.models
    if names:
        selected = {name: settings.models[name] for name in names}
    redact = Redactor(settings.secret_values())
    async with aiohttp.ClientSession() as session:
        return [await check_model(session, n, c, top_k, redact) for n, c in selected.items()]


def run_checks(
    settings: Settings, names: Iterable[str] | None = None, top_k: int = DEFAULT_TOP_K
) -> list[ModelReport]:
    """``check_models`` from synchronous code (the CLI, ``cascade serve`` before it starts serving)."""
    return asyncio.run(check_models(settings, names, top_k))


def _error_text(status: int, raw: bytes, redact: Redactor) -> str:
    """``HTTP 400: <the upstream's error message>`` on one line, secrets redacted, bounded.

    The message is the OpenAI-style ``error.message`` when the body has one, else the body's text.
    """
    try:
        document = orjson.loads(raw)
    except orjson.JSONDecodeError:
        document = None
    error = document.get("error") if isinstance(document, dict) else None
    message = error.get("message") if isinstance(error, dict) else None
    text = message if isinstance(message, str) else raw.decode("utf-8", "replace")
    # A bounded prefix is redacted (redaction reads every character), then cut to what is shown.
    return redact(f"HTTP {status}: {' '.join(text[: _ERROR_CHARS * 8].split())}")[:_ERROR_CHARS]


def problems(reports: Iterable[ModelReport]) -> list[str]:
    """One line per model that is unreachable or disagrees with its declaration."""
    lines = []
    for report in reports:
        if not report.reachable:
            lines.append(f"model {report.name}: unreachable ({report.error})")
        lines += [f"model {report.name}: {d}" for d in report.disagreements]
    return lines
