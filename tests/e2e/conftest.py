"""Session fixtures of the e2e tests that more than one module uses (the real pool itself is
``local_pool``, tests/support/local_pool.py).

* ``cascade_pool``: the manifest with the pool's 135M and 0.5B servers running (free ports), the
  two models of test_local_cascade.py and test_messages_local_cascade.py.
* ``cheap_scores``: the cheap model's own mean-token-negentropy score for each of their questions,
  asked directly (once per run: both modules put their threshold between these scores).
"""

from __future__ import annotations

import httpx
import pytest
from local_cascade_support import CHEAP, QUESTIONS, STRONG, TOP_K, chat_body

from localpool.manifest import Manifest
from policies.scorers import score_response
from tests.support.local_pool import LocalPool


@pytest.fixture(scope="session")
def cascade_pool(local_pool: LocalPool) -> Manifest:
    """The pool's cheap and strong models of the local cascade tests, served on free ports."""
    return local_pool.serve([CHEAP, STRONG])


@pytest.fixture(scope="session")
def cheap_scores(cascade_pool: Manifest) -> dict[str, float]:
    """The cheap model's own mean-token-negentropy score for each question (asked directly)."""
    url = f"http://127.0.0.1:{cascade_pool.models[CHEAP].port}/v1/chat/completions"
    scores = {}
    for question in QUESTIONS:
        body = {**chat_body(question), "model": CHEAP, "logprobs": True, "top_logprobs": TOP_K}
        response = httpx.post(url, json=body, timeout=120)
        response.raise_for_status()
        score = score_response(response.json(), "mean_token_negentropy", TOP_K)
        assert score is not None, f"no score for {question!r}"
        scores[question] = score
    return scores
