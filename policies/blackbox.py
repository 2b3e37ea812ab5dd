"""The pieces of the scorers that need no logprobs from the scored model (docs/contracts.md#scorers):
request builders and score functions. Each scorer's definition (``policies.scorers.REGISTRY``, a
``Calls``) puts them together; nothing else reads this module's functions by scorer name.

A black-box scorer judges a stage's answer with extra calls instead of the answer's own logprobs:

* ``verifier``: a second, cheap model that does return logprobs is asked whether the answer is
  right; score = P(yes) / (P(yes) + P(no)) over the alternatives of its first generated token.
* ``consistency``: k extra samples of the same stage at a temperature; score = the share of the
  samples equivalent to the answer (the equivalence, e.g. the traffic judges' ``numeric``, is a
  callable given by the caller: this module imports nothing outside ``policies``).
* ``self_report``: a follow-up call asks the stage model how confident it is, as a number from 0
  to 100; score = that number / 100.

The gateway (live calls) and collection/calibration (recorded calls) build the extra requests and
compute the scores with these very functions, through the definitions, so a threshold chosen offline
means the same online. Every score is in [0, 1], higher = more confident; None when the call gave
nothing usable.
"""

from __future__ import annotations

import math
import re
from collections.abc import Callable, Mapping, Sequence
from typing import Any

EQUIVALENCES = ("exact", "numeric", "choice", "similarity")

# The verifier's user message; {question} and {answer} are replaced (plain replacement, so braces
# elsewhere in a custom prompt or in the texts need no escaping).
VERIFIER_PROMPT = (
    "Question:\n{question}\n\nProposed answer:\n{answer}\n\n"
    "Is the proposed answer correct? Reply with one word: yes or no."
)
SELF_REPORT_PROMPT = "How confident are you that this answer is correct? Reply with a number from 0 to 100."
# The verifier reads one token; the self-report needs a number and room for "%" or a short phrase.
VERIFIER_MAX_TOKENS = 1
SELF_REPORT_MAX_TOKENS = 16
# Request fields that would change what a sample or a follow-up call is: they are dropped from the
# stage's request before the extra call (it is never streamed, never asks logprobs, one choice).
_SAMPLE_DROPPED = ("stream", "stream_options", "logprobs", "top_logprobs", "n", "best_of", "seed")

Equivalent = Callable[[str, str], bool]


def question_text(messages: Sequence[Mapping[str, Any]]) -> str:
    """The question a chat request asks, as text for the verifier's prompt.

    One user message (with or without a system message): its text. Otherwise every message but the
    system ones as ``role: text`` lines, so a multi-turn question keeps its turns. Content given as
    parts keeps its text parts.
    """
    turns = [m for m in messages if isinstance(m, Mapping) and m.get("role") != "system"]
    if len(turns) == 1 and turns[0].get("role") == "user":
        return message_text(turns[0])
    return "\n".join(f"{m.get('role', 'user')}: {message_text(m)}" for m in turns)


def message_text(message: Mapping[str, Any]) -> str:
    """The text of one chat message (string content, or the text of its content parts)."""
    return content_text(message.get("content"))


def content_text(content: Any) -> str:
    """A message ``content``: a string, or the text of its ``{"type": "text"}`` parts."""
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        return "".join(
            str(part.get("text", ""))
            for part in content
            if isinstance(part, Mapping) and part.get("type") == "text"
        )
    return ""


def answer_text(reply: Mapping[str, Any]) -> str | None:
    """The first choice's message text of a chat/completions reply body (None if it has none)."""
    choices = reply.get("choices")
    if not isinstance(choices, list) or not choices or not isinstance(choices[0], Mapping):
        return None
    message = choices[0].get("message")
    if not isinstance(message, Mapping):
        return None
    content = message.get("content")
    return content if isinstance(content, str) else None


# --- verifier -------------------------------------------------------------------------------------


def verifier_request(
    messages: Sequence[Mapping[str, Any]], answer: str, *, model: str, prompt: str, top_logprobs: int
) -> dict[str, Any]:
    """The verifier's chat request body: is ``answer`` a correct answer to the question of ``messages``?

    One token at temperature 0 with ``top_logprobs`` alternatives: the score reads their yes/no mass.
    """
    text = prompt.replace("{question}", question_text(messages)).replace("{answer}", answer)
    return {
        "model": model,
        "messages": [{"role": "user", "content": text}],
        "max_tokens": VERIFIER_MAX_TOKENS,
        "temperature": 0,
        "logprobs": True,
        "top_logprobs": top_logprobs,
    }


def yes_no_mass(position: Mapping[str, Any] | None) -> tuple[float, float]:
    """Probability mass of "yes" and "no" among a token position's alternatives (or its chosen token).

    A token counts as the word when, stripped of spaces and a trailing ``.``, ``!`` or ``,``, it reads
    "yes"/"no" ignoring case; the same token listed twice counts once.
    """
    if not position:
        return 0.0, 0.0
    alternatives = position.get("top_logprobs") or [position]
    mass = {"yes": 0.0, "no": 0.0}
    seen: set[str] = set()
    for alternative in alternatives:
        if not isinstance(alternative, Mapping):
            continue
        token = str(alternative.get("token", ""))
        word = token.strip().lower().rstrip(".!,")
        logprob = alternative.get("logprob")
        if word in mass and token not in seen and isinstance(logprob, int | float):
            seen.add(token)
            mass[word] += math.exp(float(logprob))
    return mass["yes"], mass["no"]


def first_position(reply: Mapping[str, Any]) -> dict[str, Any] | None:
    """The first generated token's logprob entry of a reply body (token, logprob, top_logprobs).

    All the verifier's score needs: collection records this instead of the whole reply.
    """
    choices = reply.get("choices")
    if not isinstance(choices, list) or not choices or not isinstance(choices[0], Mapping):
        return None
    logprobs = choices[0].get("logprobs")
    content = logprobs.get("content") if isinstance(logprobs, Mapping) else None
    if not isinstance(content, list) or not content or not isinstance(content[0], Mapping):
        return None
    entry = content[0]
    return {
        "token": entry.get("token"),
        "logprob": entry.get("logprob"),
        "top_logprobs": [
            {"token": alt.get("token"), "logprob": alt.get("logprob")}
            for alt in entry.get("top_logprobs") or []
            if isinstance(alt, Mapping)
        ],
    }


def verifier_score_from_position(position: Mapping[str, Any] | None) -> float | None:
    """P(yes) / (P(yes) + P(no)) at the verifier's first token; None when neither word is there."""
    p_yes, p_no = yes_no_mass(position)
    if p_yes + p_no <= 0:
        return None
    return p_yes / (p_yes + p_no)


def verifier_score(reply: Mapping[str, Any]) -> float | None:
    """The verifier score of the verifier's reply body (None: no logprobs, or no yes/no among them)."""
    return verifier_score_from_position(first_position(reply))


# --- consistency ----------------------------------------------------------------------------------


def sample_request(body: Mapping[str, Any], temperature: float) -> dict[str, Any]:
    """One consistency sample: the stage's own request body at ``temperature``, unstreamed, one
    choice, without logprobs (the stage model gives none, and the sample's text is all that counts)."""
    sample = {k: v for k, v in body.items() if k not in _SAMPLE_DROPPED}
    sample["temperature"] = temperature
    return sample


def consistency_score(answer: str, samples: Sequence[str], equivalent: Equivalent) -> float | None:
    """Share of ``samples`` equivalent to ``answer`` (``equivalent(answer, sample)``); None if none."""
    if not samples:
        return None
    return sum(1 for sample in samples if equivalent(answer, sample)) / len(samples)


# --- self_report ----------------------------------------------------------------------------------


def self_report_request(
    body: Mapping[str, Any], answer: str, *, prompt: str = SELF_REPORT_PROMPT
) -> dict[str, Any]:
    """The follow-up call asking the stage model for its confidence: its own request (same model,
    same messages), the answer as the assistant's turn, then ``prompt``; a few tokens at temperature 0."""
    follow_up = {
        k: v for k, v in body.items() if k not in (*_SAMPLE_DROPPED, "max_tokens", "max_completion_tokens")
    }
    follow_up["messages"] = [
        *body.get("messages", []),
        {"role": "assistant", "content": answer},
        {"role": "user", "content": prompt},
    ]
    follow_up["temperature"] = 0
    follow_up["max_tokens"] = SELF_REPORT_MAX_TOKENS
    return follow_up


_NUMBER = re.compile(r"(?<![\d.])(\d{1,3}(?:\.\d+)?)(?![\d.])")


def self_report_score(text: str | None) -> float | None:
    """The first number of the reply, divided by 100; None when there is none or it exceeds 100."""
    if not text:
        return None
    match = _NUMBER.search(text)
    if match is None:
        return None
    value = float(match.group(1))
    return value / 100 if value <= 100 else None
