"""The fail-over suite: every scenario (tests/support/failover_scenarios.py) on chat, Responses and
Messages, streamed and not, through the official openai and anthropic SDKs, against the real
gateway app in-process (tests/support/in_process_gateway.py) and the scripted upstream.

A cell is (scenario, API, streamed). Its verdict is what the client got (``Verdict``,
tests/support/failover_clients.py: a whole answer, a clean error, or a failure) and, whatever the
client got, ``UNDERCHARGED`` when the requests' charge (their log lines' ``cost_usd``) is below
what the scripted upstream billed for their calls.

``Suite`` starts one gateway per scenario (per cell where the scenario runs steady traffic: a
breaker's state is the cell's own) and keeps its log lines in a file under its ``workdir``.
``fit_to_code`` leaves out the config fields and the policy mechanism the code under test does not
know, so bench/gateway/failover_table.py runs the same table against an older checkout.
"""

from __future__ import annotations

import copy
import importlib.util
import logging
import re
import threading
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from pydantic import ValidationError

from gateway.api.app import create_app
from gateway.config.settings import Settings
from gateway.wire.logs import JsonLinesFormatter
from policies import build_policy, save_policy
from tests.support import failover_scenarios as fs
from tests.support.failover_clients import FAILURES, Verdict, ask
from tests.support.fault_matrix import PRICES
from tests.support.gateway_logs import request_lines
from tests.support.gateway_testkit import model_configs
from tests.support.in_process_gateway import InProcessGateway, scripted_transport, serve_in_process
from tests.support.policy_files import policy_document
from tests.support.provider_bills import billed_usd
from tests.support.scripted_upstream import ScriptedUpstream

APIS = ("chat", "responses", "messages")
NANO_PER_USD = 1_000_000_000
FALLBACK_TIER = {
    "mechanism": "fallback",
    "objective": {"min_quality": 0.5},
    "routes": [{"models": ["small", "large"]}],
    "expected": {"cost_usd": 0.0001, "quality": 0.5, "escalation_rate": 0.05},
}
PREFIX_COMMIT = {"rule": "prefix", "tokens": 3}
# The policy tier of each scenario tier (``balanced``: the test policy's cascade small -> large).
TIERS = {"reliable": "reliable", "cascade": "balanced", "prefix": "prefix"}


@dataclass(frozen=True, slots=True)
class Cell:
    """One cell of the table."""

    scenario: fs.Scenario
    api: str
    stream: bool

    @property
    def id(self) -> str:
        """The pytest id."""
        name = re.sub(r"[^a-z0-9]+", "-", self.scenario.name.lower()).strip("-")
        return f"{name}-{self.api}-{'stream' if self.stream else 'whole'}"


def cells() -> list[Cell]:
    """Every cell that exists (a streamed-only scenario has no whole cells)."""
    return [
        Cell(scenario, api, stream)
        for scenario in fs.SCENARIOS
        for api in APIS
        for stream in (False, True)
        if stream or not scenario.streamed_only
    ]


# -- the gateways -----------------------------------------------------------------------------------


def settings_document(upstream_url: str, scenario: fs.Scenario, policy: Path) -> dict[str, Any]:
    """The config of the gateway serving ``scenario``: the test models at the fault matrix's
    per-token prices, the scenario's small deadlines, uncertain retries, no breaker but where the
    scenario sets one, and its own changes."""
    models = model_configs(upstream_url)
    for config in models.values():
        prompt, completion = PRICES[config["model"]]
        config["price"] = {"input_per_mtok": prompt, "output_per_mtok": completion}
        config["timeout_s"] = fs.MODEL_TIMEOUT_S
        config["retry"] = {"base_s": 0.001, "uncertain": True}
        config["breaker"] = {"failures": 0, "failure_rate": None}
    models["small"]["first_token_timeout_s"] = fs.FIRST_TOKEN_TIMEOUT_S
    for name, changes in scenario.models.items():
        for setting, value in changes.items():
            models[name][setting] = (
                {**models[name].get(setting, {}), **value} if isinstance(value, dict) else value
            )
    return {
        "models": models,
        "policy": str(policy),
        "auth": {"open": True},
        "limits": {"max_body_bytes": 65536, "request_timeout_s": fs.REQUEST_TIMEOUT_S},
        "logging": {"level": "info"},
        **copy.deepcopy(scenario.config),
    }


def fit_to_code(document: dict[str, Any]) -> Settings:
    """``Settings`` of ``document`` less the fields the code under test does not know (an older
    checkout: the fields the fail-over work added are left out, as an operator of it would)."""
    document = copy.deepcopy(document)
    while True:
        try:
            return Settings.from_mapping(document)
        except Exception as exc:  # the config error names the fields; its cause lists them
            cause = exc.__cause__
            if not isinstance(cause, ValidationError):
                raise
            extra = [e["loc"] for e in cause.errors() if e["type"] == "extra_forbidden"]
            if not extra:
                raise
            for loc in extra:
                parent = document
                for part in loc[:-1]:
                    parent = parent[part]
                parent.pop(loc[-1], None)


def write_suite_policy(path: Path) -> Path:
    """The suite's policy: the test policy plus tier ``reliable`` (the ``fallback`` mechanism,
    small -> large; where the code has no such mechanism, a cascade tier small -> large whose
    confident first answer is accepted, the nearest it had) and tier ``prefix`` (``balanced`` that
    commits streamed answers on their first 3 tokens)."""
    document = policy_document()
    reliable = copy.deepcopy(FALLBACK_TIER)
    if importlib.util.find_spec("gateway.engine.fallback") is None:
        del reliable["mechanism"]
        reliable["routes"] = [{"weight": 1.0, "models": ["small", "large"], "thresholds": [0.5]}]
    document["tiers"]["reliable"] = reliable
    document["tiers"]["prefix"] = {**copy.deepcopy(document["tiers"]["balanced"]), "commit": PREFIX_COMMIT}
    save_policy(build_policy(document), path)
    return path


class Suite:
    """The gateways of the scenarios against one scripted upstream, their log lines in
    ``workdir/gateway.log`` (the ``cascade`` logger's handler, removed by ``close``)."""

    def __init__(self, upstream: ScriptedUpstream, workdir: Path) -> None:
        self.upstream = upstream
        self.workdir = workdir
        self.log = workdir / "gateway.log"
        self.policy = write_suite_policy(workdir / "policy.json")
        self.handler = logging.FileHandler(self.log)
        self.handler.setFormatter(JsonLinesFormatter())
        logging.getLogger("cascade").addHandler(self.handler)
        self.gateways: dict[str, InProcessGateway] = {}

    def gateway(self, scenario: fs.Scenario, fresh: bool = False) -> InProcessGateway:
        """The scenario's gateway (a new one when ``fresh``)."""
        running = self.gateways.pop(scenario.name, None) if fresh else self.gateways.get(scenario.name)
        if fresh and running is not None:
            running.stop()
            running = None
        if running is None:
            settings = fit_to_code(settings_document(self.upstream.base_url, scenario, self.policy))
            app = create_app(settings, transport=scripted_transport(self.upstream))
            running = self.gateways[scenario.name] = serve_in_process(app)
        return running

    def run(self, cell: Cell) -> str:
        """Run one cell: script, send (``requests`` of them), wait for every charge, judge."""
        scenario = cell.scenario
        self.upstream.reset()
        released = threading.Event()
        scenario.script(self.upstream, released)
        gateway = self.gateway(scenario, fresh=scenario.requests > 1)
        tier = TIERS[scenario.tier]
        try:
            verdicts = [ask(gateway, cell.api, tier, cell.stream) for _ in range(scenario.requests)]
        finally:
            released.set()
        text = _summary(verdicts)
        if scenario.requests > 1:
            text += f"; primary attempts {len(self.upstream.calls(fs.PRIMARY))}"
        return text + self._charge_problem(verdicts)

    def _charge_problem(self, verdicts: list[Verdict]) -> str:
        """`` UNDERCHARGED ...`` when the requests' charges are below what the upstream billed."""
        ids = [v.request_id for v in verdicts if v.request_id]
        lines = request_lines(self.log, ids, timeout_s=10)
        if len(ids) < len(verdicts) or not set(ids) <= set(lines):
            return " (charge unknown: a request has no log line)"
        charged = sum(round(lines[i]["cost_usd"] * NANO_PER_USD) for i in ids)
        billed = round(billed_usd(self.upstream.bills, PRICES) * NANO_PER_USD)
        return f" UNDERCHARGED ({charged} < {billed} nano-USD)" if charged < billed else ""

    def close(self) -> None:
        """Stop every gateway and remove the log handler."""
        for running in self.gateways.values():
            running.stop()
        logging.getLogger("cascade").removeHandler(self.handler)
        self.handler.close()


def _summary(verdicts: list[Verdict]) -> str:
    """One verdict, or ``<verdict> xN`` per distinct verdict of a cell's requests."""
    if len(verdicts) == 1:
        return str(verdicts[0])
    counts: dict[str, int] = {}
    for verdict in verdicts:
        counts[str(verdict)] = counts.get(str(verdict), 0) + 1
    return ", ".join(f"{text} x{count}" for text, count in counts.items())


# -- the record of a run -----------------------------------------------------------------------------


class FailoverRecord:
    """The verdict of every cell run in this process, for the table printed after the tests."""

    def __init__(self) -> None:
        self.verdicts: dict[Cell, str] = {}

    def add(self, cell: Cell, verdict: str) -> None:
        """Record one cell's verdict."""
        self.verdicts[cell] = verdict

    def table(self) -> list[str]:
        """A markdown table (scenario x API x streamed -> verdict), a line of counts above it."""
        failed = sum(1 for v in self.verdicts.values() if failed_verdict(v))
        columns = [(api, stream) for api in APIS for stream in (False, True)]
        head = " | ".join(f"{api} {'stream' if stream else 'whole'}" for api, stream in columns)
        lines = [
            f"fail-over suite: {len(self.verdicts)} cells run, {failed} failed",
            f"| scenario | {head} |",
            "|---" * (len(columns) + 1) + "|",
        ]
        for scenario in fs.SCENARIOS:
            row = [self.verdicts.get(Cell(scenario, api, stream)) for api, stream in columns]
            if any(row):
                lines.append(f"| {scenario.name} | " + " | ".join(v or "-" for v in row) + " |")
        return lines


def failed_verdict(verdict: str) -> bool:
    """Whether a cell's verdict names a failure (``FAILURES``), for any of its requests."""
    return any(word in verdict for word in FAILURES) or "charge unknown" in verdict


RECORD = FailoverRecord()


def run_table(upstream: ScriptedUpstream, workdir: Path) -> Iterator[tuple[Cell, str]]:
    """Every cell's verdict in turn (the bench's whole table), recorded in ``RECORD``."""
    suite = Suite(upstream, workdir)
    try:
        for cell in cells():
            verdict = suite.run(cell)
            RECORD.add(cell, verdict)
            yield cell, verdict
    finally:
        suite.close()
