"""The ``llm`` judge: the reference model is asked whether two answers agree.

One chat completion on an OpenAI-compatible endpoint, ``max_tokens: 1``, ``temperature: 0``,
``logprobs`` with ``top_logprobs``. The soft label is P(yes) / (P(yes) + P(no)), summing the
probabilities of the alternatives of the first token that read "yes" / "no" (case and spaces
ignored): renormalizing over the two words makes the label independent of how much mass the model
puts elsewhere (punctuation, "Yes" vs " yes" tokens). If neither word is among the alternatives
the label is missing. The call's cost (``money.charges.attempt_charge``: its usage at the configured
price, or the flat price or an estimate that errs high when the answer reports none; its worst
case when it timed out or broke after it was sent) is in the verdict, or in the ``JudgeError`` of a
call that failed: the sampler counts it as shadow cost.
"""

from __future__ import annotations

import os
from typing import Any

import httpx
import orjson

from money import Price
from money.charges import Attempt, attempt_charge
from policies.blackbox import yes_no_mass
from redaction import Redactor, url_secrets
from traffic.judges.base import JudgeError, Verdict

SYSTEM_PROMPT = (
    "You compare two answers to the same question. Reply with one word: yes if they give the same "
    "final answer (wording, length and explanations do not matter), no otherwise."
)
USER_TEMPLATE = (
    "Question:\n{question}\n\nAnswer A:\n{reference}\n\nAnswer B:\n{answer}\n\n"
    "Do A and B give the same answer?"
)


class LLMJudge:
    """Asks an OpenAI-compatible model whether the answers agree; label = its normalized P(yes)."""

    name = "llm"

    def __init__(
        self,
        base_url: str,
        model: str,
        *,
        price: Price,
        api_key_env: str | None = None,
        timeout_s: float = 30.0,
        top_logprobs: int = 10,
        transport: httpx.AsyncBaseTransport | None = None,
    ):
        self.url = base_url.rstrip("/") + "/chat/completions"
        self.model = model
        self.price = price
        self.api_key_env = api_key_env
        self.timeout_s = timeout_s
        self.top_logprobs = top_logprobs
        self._transport = transport
        self._client: httpx.AsyncClient | None = None

    def _http(self) -> httpx.AsyncClient:
        if self._client is None:  # created on first use, inside the running loop
            self._client = httpx.AsyncClient(transport=self._transport, timeout=self.timeout_s)
        return self._client

    async def aclose(self) -> None:
        """Close the HTTP client."""
        if self._client is not None:
            await self._client.aclose()
            self._client = None

    def _redactor(self, headers: dict[str, str]) -> Redactor:
        """Keeps the judge's key and URL password out of the upstream text its errors quote."""
        key = headers.get("Authorization", "").removeprefix("Bearer ")
        return Redactor([key, *url_secrets(self.url)])

    def request_body(self, question: str, reference: str, answer: str) -> dict[str, Any]:
        """The chat completion request sent for one pair."""
        return {
            "model": self.model,
            "messages": [
                {"role": "system", "content": SYSTEM_PROMPT},
                {
                    "role": "user",
                    "content": USER_TEMPLATE.format(question=question, reference=reference, answer=answer),
                },
            ],
            "max_tokens": 1,
            "temperature": 0,
            "logprobs": True,
            "top_logprobs": self.top_logprobs,
        }

    async def judge(self, question: str, reference: str, answer: str) -> Verdict:
        """P(yes) as a soft label; ``JudgeError`` when the call fails."""
        headers = {}
        if self.api_key_env:
            key = os.environ.get(self.api_key_env)
            if not key:
                raise JudgeError(f"llm judge: environment variable {self.api_key_env} is not set")
            headers["Authorization"] = f"Bearer {key}"
        sent = orjson.dumps(self.request_body(question, reference, answer))
        headers["Content-Type"] = "application/json"
        try:
            response = await self._http().post(self.url, content=sent, headers=headers)
        except httpx.HTTPError as exc:
            redact = self._redactor(headers)
            # Only a connection that was never made is provably not served; anything after the
            # request was sent (a timeout, a dropped connection) is charged its worst case.
            never_sent = isinstance(exc, httpx.ConnectError | httpx.ConnectTimeout)
            cost = attempt_charge(self.price, Attempt(sent, billable=not never_sent)).usd
            raise JudgeError(
                f"llm judge {self.model}: {type(exc).__name__}: {redact(str(exc))}", cost_usd=cost
            ) from None
        if response.status_code != 200:  # an error status: nothing was served, nothing charged
            text = self._redactor(headers)(response.text)[:200]
            raise JudgeError(f"llm judge {self.model}: HTTP {response.status_code}: {text}")
        try:
            body = response.json()
        except ValueError as exc:  # an answer that cannot be read: its worst case
            cost = attempt_charge(self.price, Attempt(sent)).usd
            raise JudgeError(f"llm judge {self.model}: malformed response ({exc})", cost_usd=cost) from exc
        cost = attempt_charge(self.price, Attempt(sent, answer=body)).usd
        try:
            content = body["choices"][0].get("logprobs", {}).get("content") or []
        except (KeyError, IndexError, TypeError, AttributeError) as exc:
            raise JudgeError(f"llm judge {self.model}: malformed response ({exc})", cost_usd=cost) from exc
        p_yes, p_no = yes_no_mass(content[0] if content else None)
        if p_yes + p_no <= 0:
            return Verdict(
                None, self.name, cost, detail="neither yes nor no among the first token's alternatives"
            )
        return Verdict(p_yes / (p_yes + p_no), self.name, cost, detail=f"P(yes)={p_yes:.4f} P(no)={p_no:.4f}")
