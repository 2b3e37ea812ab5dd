"""The fault matrix (tests/support/fault_matrix.py): every upstream fault on every call of a request,
on every API, whole and streamed, against the scripted upstream that logs what a provider bills.

Over every cell, with real Redis spend under a private prefix and a fresh key per cell:

* money: what the key was charged (its Redis spend counter once the request settled) is at least
  what the provider billed for the request's calls; for a shadow call, what the learning sampler
  counted (``cascade_shadow_cost_usd_total``) is at least what the provider billed for it;
* the reservation covers the bill: what the provider billed for the request's calls is at most
  the worst case reserved for it (the request's log line), and each call's bill (shadow calls
  too) at most the worst case of what it sent (tests/support/money.py: its bytes and the cap it
  sent, or the default bound when it sent none): the cap reserved is the cap sent;
* the response is never a 500 (the HTTP status, the status of the request's log line, or an error
  event inside a started stream); any error is in the API's own shape.

And the limit: rounds of concurrent requests near a key's limit, under faults whose answers are
long, never take what the provider billed past the limit by more than one request's worst case.

Settlement is waited for, not slept on: the request's log line is written after its spend is
settled (gateway/api/endpoint.py ``_finish``), a shadow sample's write after its spend is counted.
"""

from __future__ import annotations

import asyncio
import itertools
import logging
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx
import orjson
import pytest
import redis

from gateway.api.app import create_app
from gateway.commands.keys import add_key
from gateway.config.settings import Settings
from gateway.redis.keys import RedisKeys
from gateway.wire.logs import JsonLinesFormatter
from money import Price
from money.charges import sent_bound
from tests.support import fault_matrix as fm
from tests.support.gateway_logs import request_lines
from tests.support.gateway_testkit import ADMIN_KEY, RunningGateway, model_configs, serve, stop, until
from tests.support.money import worst_case_usd
from tests.support.policy_files import write_policy
from tests.support.provider_bills import Bill, billed_usd
from tests.support.scripted_upstream import ScriptedUpstream
from tests.support.shared_redis import REDIS_URL, delete_prefix, fresh_keys
from tests.support.traffic_rows import stored_rows

SCORERS: dict[str, dict[str, Any]] = {
    "logprobs": {"name": "mean_token_negentropy", "top_k": 5},
    "verifier": {"name": "verifier", "top_k": 5, "verifier": {"model": "medium"}},
    "consistency": {"name": "consistency", "samples": 3, "temperature": 0.7, "equivalence": "exact"},
    "self_report": {"name": "self_report"},
    "shadow": {"name": "mean_token_negentropy", "top_k": 5},
    "prefix": {"name": "mean_token_negentropy", "top_k": 5},
}
# The prefix setup's default tier decides streamed text requests on their first tokens.
PREFIX_TIER = {"balanced": {"commit": {"rule": "prefix", "tokens": fm.PREFIX_TOKENS}}}
KEY_LIMIT_USD = 1000.0  # far above any cell's charge but a huge usage's: refusals are not tested here
NANO_PER_USD = 1_000_000_000
# A float shadow-cost counter that passed this many USD (a huge usage) counts cents no more.
SHADOW_COUNTER_CEILING_USD = 1e6
MODEL_IDS = {"small": "up-small", "medium": "up-medium", "large": "up-large"}


class Matrix:
    """The gateways (one per setup, started when first needed), the key store, the log and a client."""

    def __init__(self, upstream: ScriptedUpstream, workdir: Path, keys: RedisKeys) -> None:
        self.upstream = upstream
        self.workdir = workdir
        self.keys = keys
        self.log = workdir / "gateway.log"
        self.redis = redis.Redis.from_url(REDIS_URL, decode_responses=True)
        self.http = httpx.Client(timeout=30)
        self.gateways: dict[str, RunningGateway] = {}
        self.store = ""  # the traffic store of the shadow setup's gateway
        self.names = itertools.count()

    def gateway(self, setup: str) -> RunningGateway:
        """The gateway of ``setup`` (a fresh one for a shadow setup whose cost counter overflowed)."""
        running = self.gateways.get(setup)
        if running is not None and setup == "shadow" and shadow_cost(running) > SHADOW_COUNTER_CEILING_USD:
            stop(running)
            running = None
        if running is None:
            running = self.gateways[setup] = serve(create_app(self.settings(setup)))
        return running

    def settings(self, setup: str) -> Settings:
        models = model_configs(self.upstream.base_url)
        for config in models.values():
            prompt, completion = fm.PRICES[config["model"]]
            config["price"] = {"input_per_mtok": prompt, "output_per_mtok": completion}
            config["timeout_s"] = fm.MODEL_TIMEOUT_S
            # A reset before any answer byte is retried (charged its worst case, reserved for every
            # attempt); no circuit opens: every cell meets its fault, whatever the cells before it.
            config["retry"] = {"base_s": 0.001, "uncertain": True}
            config["breaker"] = {"failures": 0, "failure_rate": None}
            if setup == "prefix":
                config["cancel_overrun_tokens"] = fm.CANCEL_OVERRUN_TOKENS
        tiers = PREFIX_TIER if setup == "prefix" else None
        policy = write_policy(self.workdir / f"{setup}.json", tiers, scorer=SCORERS[setup])
        document: dict[str, Any] = {
            "models": models,
            "policy": str(policy),
            "redis_url": REDIS_URL,
            "redis_timeout_s": 2,  # a busy test machine is no Redis outage (spend would fall back)
            "auth": {"api_keys_env": None},
            "limits": {"max_body_bytes": 1 << 20, "request_timeout_s": 10},
            "logging": {"level": "info"},
        }
        if setup == "shadow":
            self.store = f"file://{self.workdir / f'traffic-{next(self.names)}.jsonl'}"
            document["learning"] = {
                "enabled": True,
                "sample_rate": 1.0,
                "judge": {"kind": "exact"},
                "store": self.store,
                "max_shadow_usd_per_hour": 1e30,  # never the cap: a refused sample would test nothing
                "flush_interval_s": 0.05,
            }
        return Settings.from_mapping(document)

    def new_key(self, limit_usd: float = KEY_LIMIT_USD) -> tuple[str, str]:
        """A fresh client key: (key, key_id)."""
        return add_key(self.redis, f"matrix-{next(self.names)}", limit_usd, self.keys)

    def spend_nano(self, running: RunningGateway, key_id: str) -> tuple[int, int]:
        """(the key's spend counter, its pending reservations) in nano-USD, this window and the last."""
        limiter = running.gateway.shared.spend
        now = limiter.window_start()
        counted = pending = 0
        for window in (now - limiter.window_s, now):
            counted += int(self.redis.get(self.keys.spend(key_id, window)) or 0)
            pending += sum(int(v) for v in self.redis.hvals(self.keys.spend_pending(key_id, window)))
        return counted, pending

    def close(self) -> None:
        for running in self.gateways.values():
            stop(running)
        self.http.close()
        self.redis.close()


@pytest.fixture(scope="module")
def matrix(
    scripted_upstream_server: ScriptedUpstream,
    tmp_path_factory: pytest.TempPathFactory,
) -> Iterator[Matrix]:
    """The matrix's gateways under a private Redis prefix, their log lines in a file (the summary of
    the cells run is printed by tests/gateway/conftest.py's ``pytest_terminal_summary``)."""
    keys = fresh_keys()
    workdir = tmp_path_factory.mktemp("fault-matrix")
    handler = logging.FileHandler(workdir / "gateway.log")
    handler.setFormatter(JsonLinesFormatter())
    cascade_logger = logging.getLogger("cascade")
    with pytest.MonkeyPatch.context() as env:
        for name in ("CASCADE_API_KEYS", "CASCADE_POLICY", "CASCADE_REDIS_URL"):
            env.delenv(name, raising=False)
        env.setenv("CASCADE_ADMIN_KEY", ADMIN_KEY)
        env.setenv("CASCADE_REDIS_PREFIX", keys.prefix)
        cascade_logger.addHandler(handler)
        built = Matrix(scripted_upstream_server, workdir, keys)
        try:
            yield built
        finally:
            built.close()
            cascade_logger.removeHandler(handler)
            handler.close()
            delete_prefix(keys)


# -- one request ------------------------------------------------------------------------------------


@dataclass
class Exchange:
    """One request as the client saw it."""

    status: int
    body: bytes
    request_id: str | None
    stream_error: bytes | None = None  # the error event a started stream ended with


def send(
    http: httpx.Client, running: RunningGateway, endpoint: str, body: dict[str, Any], key: str
) -> Exchange:
    """Send ``body`` to ``endpoint`` with ``key``; read the whole response (a stream to its end)."""
    url = running.url + fm.PATHS[endpoint]
    headers = {"authorization": f"Bearer {key}"}
    with http.stream("POST", url, json=body, headers=headers) as response:
        data = response.read()
        exchange = Exchange(response.status_code, data, response.headers.get("x-request-id"))
    if response.status_code == 200 and body.get("stream"):
        exchange.stream_error = next((e for e in data.split(b"\n\n") if _error_event(e)), None)
    return exchange


def _error_event(event: bytes) -> bool:
    return event.startswith(b"event: error") or b'"type":"response.failed"' in event


async def send_async(
    http: httpx.AsyncClient, running: RunningGateway, endpoint: str, body: dict[str, Any], key: str
) -> Exchange:
    """``send`` on an async client (whole answers only)."""
    url = running.url + fm.PATHS[endpoint]
    response = await http.post(url, json=body, headers={"authorization": f"Bearer {key}"})
    return Exchange(response.status_code, response.content, response.headers.get("x-request-id"))


def shadow_cost(running: RunningGateway) -> float:
    """USD the learning sampler counted for shadow calls so far (every model)."""
    return _metric_sum(running, "cascade_shadow_cost_usd_total")


def samples_dropped(running: RunningGateway) -> float:
    """Samples the learning sampler dropped so far (any reason)."""
    return _metric_sum(running, "cascade_learning_dropped_total")


def sample_done(matrix: Matrix, running: RunningGateway, query_id: str, dropped_before: float) -> bool:
    """Whether the sample of request ``query_id`` is over: its rows are stored (they are built once
    every shadow call ended and was counted) or a sample was dropped since ``dropped_before``."""
    if samples_dropped(running) > dropped_before:
        return True
    return any(row.query_id == query_id for row in stored_rows(matrix.store))


def _metric_sum(running: RunningGateway, name: str) -> float:
    return sum(
        s.value
        for family in running.gateway.metrics.registry.collect()
        for s in family.samples
        if s.name == name
    )


def nano(usd: float) -> int:
    """Nano-USD of a bill (exact: the test prices are whole USD per million tokens)."""
    return round(usd * NANO_PER_USD)


# -- the matrix -------------------------------------------------------------------------------------


@dataclass
class CellRun:
    """What one cell observed, and the invariants it broke."""

    exchange: Exchange
    line: dict[str, Any]
    charged_nano: int
    pending_nano: int
    own_bills: list[Bill]
    shadow_bills: list[Bill] = field(default_factory=list)
    shadow_counted_usd: float = 0.0
    violations: list[str] = field(default_factory=list)

    def check(self, endpoint: str) -> None:
        """Collect the violated invariants (see the module docstring)."""
        billed = nano(billed_usd(self.own_bills, fm.PRICES))
        if self.pending_nano:
            self.violations.append(f"unsettled: {self.pending_nano} nano-USD still reserved")
        if self.charged_nano < billed:
            self.violations.append(
                f"undercharged: key charged {self.charged_nano} < billed {billed} nano-USD "
                f"({len(self.own_bills)} billed calls: {_calls(self.own_bills)})"
            )
        reserved = self.line.get("worst_case_usd")
        if billed and (reserved is None or billed > nano(reserved) + 1):
            self.violations.append(f"over reservation: billed {billed} > reserved {reserved} USD")
        if self.exchange.status == 500 or self.line.get("status") == 500:
            self.violations.append(f"500: HTTP {self.exchange.status}, logged {self.line.get('status')}")
        elif self.exchange.stream_error is not None and _internal(self.exchange.stream_error):
            self.violations.append("500: an internal error event inside the stream")
        shape = fm.error_shape_problem(endpoint, self.exchange.status, self.exchange.body)
        if shape is not None:
            self.violations.append(f"error shape: {shape}")
        shadow_billed = billed_usd(self.shadow_bills, fm.PRICES)
        if nano(self.shadow_counted_usd) + 1 < nano(shadow_billed):
            self.violations.append(
                f"shadow undercharged: counted {self.shadow_counted_usd:.9f} < billed "
                f"{shadow_billed:.9f} USD ({_calls(self.shadow_bills)})"
            )
        over = [bill for bill in self.own_bills + self.shadow_bills if _over_sent_bound(bill)]
        if over:
            self.violations.append(
                f"over sent cap: billed past the worst case of what was sent: {_calls(over)}"
            )


def _over_sent_bound(bill: Bill) -> bool:
    """Whether a call billed more than the worst case of the request it sent (its bytes, and the cap
    it sent or, sending none, the default bound a reservation assumes): an uncapped answer."""
    bound = worst_case_usd(orjson.loads(bill.sent), [str(bill.model)], _prices_by_id())
    return nano(billed_usd([bill], fm.PRICES)) > nano(bound) + 1


def _internal(event: bytes) -> bool:
    """Whether a stream's error event is the gateway's own internal error (a 500 in a stream)."""
    return b"internal_error" in event or b"internal error (request" in event


def _calls(bills: list[Bill]) -> str:
    return ", ".join(f"{b.model}({b.prompt_tokens}+{b.completion_tokens})" for b in bills)


def run_cell(matrix: Matrix, cell: fm.Cell) -> CellRun:
    """Run one cell: script, send, wait for the settlement (and a shadow sample's end), measure."""
    upstream = matrix.upstream
    upstream.reset()
    faulted = fm.script_cell(upstream, cell)
    running = matrix.gateway(cell.setup)
    key, key_id = matrix.new_key()
    shadow = cell.call == "shadow"
    shadow_before, dropped_before = (shadow_cost(running), samples_dropped(running)) if shadow else (0.0, 0.0)
    exchange = send(matrix.http, running, cell.endpoint, fm.client_body(cell.endpoint, cell.stream), key)
    assert exchange.request_id, f"no x-request-id (HTTP {exchange.status}: {exchange.body[:200]!r})"
    line = request_lines(matrix.log, [exchange.request_id]).get(exchange.request_id)
    assert line is not None, f"no log line for request {exchange.request_id}: it never settled"
    if cell.fault == "cancelled_on_escalation":  # its bill is written when the upstream sees the close
        assert until(lambda: all(s.closed for s in upstream.streams), 10), "a cancelled stream never ended"
    charged, pending = matrix.spend_nano(running, key_id)
    run = CellRun(exchange, line, charged, pending, [b for b in upstream.bills if b.at <= line["ts"]])
    if shadow and line["status"] == 200:
        request_id = exchange.request_id
        done = until(lambda: sample_done(matrix, running, request_id, dropped_before), 30)
        assert done, "the shadow sample never finished"
        run.shadow_bills = [b for b in upstream.bills if b.at > line["ts"]]
        run.shadow_counted_usd = shadow_cost(running) - shadow_before
    run.check(cell.endpoint)
    if cell.fault in fm.TRANSIENT_FAULTS:  # the reset attempt and its retry, answered
        retried = len(upstream.calls(faulted)) >= 2
        if not retried or exchange.status != 200 or exchange.stream_error is not None:
            run.violations.append(f"a reset before any byte was not retried and answered: {exchange.status}")
    if cell.fault == "cancelled_on_escalation":
        if line.get("commit_tokens") != fm.PREFIX_TOKENS or line.get("escalation_reasons") != ["low_score"]:
            run.violations.append(f"not cancelled on its prefix: {line.get('commit_tokens')} tokens held")
        # The closed stream is charged its chunks and declared overrun, below its worst case (the cap).
        cheap = [b for b in run.own_bills if b.model == MODEL_IDS["small"]]
        rest = [b for b in run.own_bills if b.model != MODEL_IDS["small"]]
        worst = sum(sent_bound(_token_price(b.model), b.sent).usd for b in cheap)
        if charged >= nano(worst + billed_usd(rest, fm.PRICES)):
            run.violations.append(
                "the cancelled stream was charged its worst case, not its chunks and overrun"
            )
    return run


@pytest.mark.parametrize("cell", fm.cells(), ids=lambda cell: cell.id)
def test_a_faulted_call_is_charged_what_it_billed_within_its_reservation_and_never_a_500(
    matrix: Matrix, cell: fm.Cell
) -> None:
    run = run_cell(matrix, cell)
    fm.RECORD.add(cell, run.violations)
    assert not run.violations, "\n".join(run.violations)


# -- the limit under concurrency --------------------------------------------------------------------

CONCURRENT = 8  # requests per round
ROUNDS = 3  # at most; a round the key refuses in full ends the test early
# Faults whose answer is long (``UNCAPPED_TOKENS``, or the cap the request sends), on every call.
LIMIT_FAULTS = ("uncapped_answer", "timeout_before_headers", "cut_body")


@pytest.mark.parametrize(
    ("endpoint", "fault"),
    [pytest.param(e, f, id=f"{e}-{f}") for e, f in itertools.product(fm.ENDPOINTS, LIMIT_FAULTS)],
)
def test_concurrent_requests_near_the_limit_never_bill_past_it_by_more_than_one_worst_case(
    matrix: Matrix, endpoint: str, fault: str
) -> None:
    upstream, running = matrix.upstream, matrix.gateway("logprobs")
    body = fm.client_body(endpoint, stream=False)
    # One request answered normally tells the gateway's own reservation for this request.
    upstream.reset()
    upstream.set_default("up-small", fm.answer())
    probe_key, _ = matrix.new_key()
    probe = send(matrix.http, running, endpoint, body, probe_key)
    assert probe.status == 200 and probe.request_id, probe.body[:200]
    reserved = request_lines(matrix.log, [probe.request_id])[probe.request_id]["worst_case_usd"]
    worst = max(reserved, worst_case_usd(body, ["small", "large"], _prices_by_name()))
    limit = 2.5 * worst
    upstream.reset()
    for model_id in MODEL_IDS.values():
        upstream.set_default(model_id, fm.fault_reply(fault, uncapped_tokens=fm.UNCAPPED_TOKENS))
    key, key_id = matrix.new_key(limit)
    exchanges = asyncio.run(_rounds(running, endpoint, body, key))
    ids = [e.request_id for e in exchanges if e.request_id]
    lines = request_lines(matrix.log, ids)
    assert set(ids) <= set(lines), "a request never settled"
    assert all(e.status != 500 for e in exchanges), [e.status for e in exchanges]
    billed = billed_usd(upstream.bills, fm.PRICES)
    charged, _ = matrix.spend_nano(running, key_id)
    admitted = sum(1 for e in exchanges if e.status != 429)
    fm.RECORD.add_limit(f"{endpoint}-{fault}", nano(billed) <= nano(limit + worst))
    assert nano(billed) <= nano(limit + worst), (
        f"billed {billed:.6f} USD on a key limited to {limit:.6f} (one worst case {worst:.6f}): "
        f"{admitted} of {len(exchanges)} requests admitted, key charged {charged / NANO_PER_USD:.6f}"
    )


async def _rounds(running: RunningGateway, endpoint: str, body: dict[str, Any], key: str) -> list[Exchange]:
    """Up to ``ROUNDS`` rounds of ``CONCURRENT`` requests; stops after a round refused in full."""
    exchanges: list[Exchange] = []
    async with httpx.AsyncClient(timeout=30) as http:
        for _ in range(ROUNDS):
            batch = await asyncio.gather(
                *(send_async(http, running, endpoint, body, key) for _ in range(CONCURRENT))
            )
            exchanges += batch
            if all(e.status == 429 for e in batch):
                break
    return exchanges


def _prices_by_name() -> dict[str, tuple[float, float]]:
    return {name: fm.PRICES[model_id] for name, model_id in MODEL_IDS.items()}


def _token_price(model_id: str | None) -> Price:
    prompt, completion = fm.PRICES[model_id]
    return Price(input_per_mtok=prompt, output_per_mtok=completion)


def _prices_by_id() -> dict[str, tuple[float, float]]:
    return {str(model_id): price for model_id, price in fm.PRICES.items()}
