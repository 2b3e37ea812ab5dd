"""The fail-over suite (tests/support/failover_suite.py): a primary failing each way of
tests/support/failover_scenarios.py (429 with and without Retry-After, 500 once, 503 for good, a
reset before the headers, silence, a late first token, a stream cut, stalled, malformed or without
``[DONE]``, a 400 context-length or content-policy refusal, a primary down under steady traffic, a
committed prefix that breaks), on a tier primary -> fallback, on chat, Responses and Messages,
streamed and not, through the official SDKs against the real app in-process.

Every cell: the client gets a whole answer (from any model) or a clean error in the API's shape,
never a truncated success, a hang past the deadline or a 500, and the request is charged at least
what the scripted upstream billed; and the answer is the one the fail-over rules give (the primary's
after a retry, the fallback's after a fail-over, the refusal returned: docs/contracts.md#faults).
The judge is tested too: an answer served whole whose words are cut is ``TRUNCATED``.
The table of verdicts is printed after the run (tests/conftest.py); bench/gateway/failover_table.py
prints the same table against any checkout (docs/benchmarks.md, before and after).
"""

from __future__ import annotations

import threading
from collections.abc import Iterator

import pytest

from tests.support import failover_scenarios as fs
from tests.support.failover_suite import RECORD, Cell, Suite, cells, failed_verdict
from tests.support.gateway_testkit import ADMIN_KEY
from tests.support.scripted_upstream import ScriptedUpstream

PRIMARY_ATTEMPTS_PER_CALL = 3  # the test models' small: max_retries 2


@pytest.fixture(scope="module")
def suite(
    scripted_upstream_server: ScriptedUpstream, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Suite]:
    """The scenarios' gateways (in-process, one per scenario) against the session's upstream."""
    with pytest.MonkeyPatch.context() as env:
        for name in ("CASCADE_API_KEYS", "CASCADE_POLICY", "CASCADE_REDIS_URL"):
            env.delenv(name, raising=False)
        env.setenv("CASCADE_ADMIN_KEY", ADMIN_KEY)
        built = Suite(scripted_upstream_server, tmp_path_factory.mktemp("failover-suite"))
        try:
            yield built
        finally:
            built.close()


@pytest.mark.parametrize("cell", cells(), ids=lambda cell: cell.id)
def test_a_failing_primary_gives_a_whole_answer_or_a_clean_error_charged_at_least_its_bill(
    suite: Suite, cell: Cell
) -> None:
    verdict = suite.run(cell)
    RECORD.add(cell, verdict)

    assert not failed_verdict(verdict), verdict
    scenario = cell.scenario
    expect = (scenario.expect_streamed if cell.stream else None) or scenario.expect
    if expect == "answer":
        assert verdict.startswith(f"answer ({scenario.served_by})"), verdict
    elif expect == "error":
        assert verdict.startswith("error "), verdict
    if scenario.requests > 1:  # steady traffic: the breaker opened after its failed calls
        primary_attempts = len(suite.upstream.calls(fs.PRIMARY))
        assert primary_attempts <= fs.BREAKER_FAILURES * PRIMARY_ATTEMPTS_PER_CALL, verdict


def _cut_answer_served(upstream: ScriptedUpstream, released: threading.Event) -> None:
    """The primary answers 40 of its 60 words and says it finished (a lying upstream)."""
    upstream.set_default(fs.PRIMARY, fs.answer(" ".join(fs.PRIMARY_TEXT.split()[:40])))


CUT_ANSWER_SERVED = fs.Scenario("a cut answer served as whole", _cut_answer_served)


@pytest.mark.parametrize(("api", "stream"), [("chat", False), ("responses", True), ("messages", True)])
def test_the_verdict_of_a_served_answer_missing_words_is_truncated(
    suite: Suite, api: str, stream: bool
) -> None:
    """The judge itself: an answer the gateway serves whole but whose text is cut is a failure."""
    verdict = suite.run(Cell(CUT_ANSWER_SERVED, api, stream))

    assert verdict == "TRUNCATED"
    assert failed_verdict(verdict)
