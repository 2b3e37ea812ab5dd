"""Generated request bodies and an honest upstream, for the property tests of the charging rule.

* ``chat_bodies()`` / ``completion_bodies()`` / ``request_bodies()``: hypothesis strategies of client
  request bodies the gateway accepts (``gateway.wire.requests.parse_request``): chat messages or a legacy
  ``prompt`` (a string, a list of strings, a token array, a list of token arrays), ``n``, ``best_of``,
  every completion cap (``max_tokens``, ``max_completion_tokens``, ``n_predict``: absent, positive,
  zero or negative, fractional), ``tools`` and ``response_format``.
* ``honest_usage(sent, honoured)``: the most an honest upstream bills for the request ``sent``
  (as the gateway sends it), written out here independently of money/charges.py: at most one
  prompt token per byte of the prompt's JSON (the messages or prompts, and the tools or schema a
  template renders, plus a template preamble of at most ``TEMPLATE_TOKENS``), and per prompt and
  per generated choice (``max(n, best_of)``) at most the cap it honours: the value of the cap field
  ``honoured`` (one the request sets) when that is a positive number (rounded up); for a request
  that sets none (``honoured`` None), or a cap that is no positive number ("unbounded"), the
  upstream's own limit, which the gateway assumes to be ``DEFAULT_COMPLETION_BOUND``.
* ``honoured_caps(sent)``: the cap fields ``sent`` sets (an upstream honours one of them), or
  ``[None]``.
"""

from __future__ import annotations

import math
from typing import Any

import orjson
from hypothesis import strategies as st

from money.charges import DEFAULT_COMPLETION_BOUND, TEMPLATE_TOKENS

CAP_FIELDS = ("max_completion_tokens", "max_tokens", "n_predict")

texts = st.text(max_size=40)
token_ids = st.integers(0, 250_000)
int_caps = st.integers(-3, 3000)
prompts = st.one_of(
    texts,
    st.lists(texts, min_size=1, max_size=30),
    st.lists(token_ids, min_size=1, max_size=30),
    st.lists(st.lists(token_ids, max_size=8), min_size=1, max_size=30),
)
messages = st.lists(
    st.fixed_dictionaries({"role": st.sampled_from(["system", "user", "assistant"]), "content": texts}),
    min_size=1,
    max_size=5,
)
tools = st.lists(
    st.fixed_dictionaries(
        {
            "type": st.just("function"),
            "function": st.fixed_dictionaries(
                {"name": st.text("abcdefgh_", min_size=1, max_size=12)},
                optional={"description": texts, "parameters": st.just({"type": "object"})},
            ),
        }
    ),
    min_size=1,
    max_size=3,
)
response_formats = st.one_of(
    st.just({"type": "json_object"}),
    st.builds(
        lambda text: {"type": "json_schema", "json_schema": {"name": "a", "schema": {"description": text}}},
        texts,
    ),
)
options = {
    "n": st.integers(1, 6),
    "best_of": st.integers(-1, 6),
    "max_tokens": int_caps,
    "max_completion_tokens": int_caps,
    "n_predict": st.one_of(int_caps, st.floats(0.1, 3000, allow_nan=False)),
    "tools": tools,
    "response_format": response_formats,
}


def chat_bodies() -> st.SearchStrategy[dict[str, Any]]:
    """Chat completion request bodies."""
    return st.fixed_dictionaries({"model": st.just("m"), "messages": messages}, optional=options)


def completion_bodies() -> st.SearchStrategy[dict[str, Any]]:
    """Legacy completion request bodies."""
    return st.fixed_dictionaries({"model": st.just("m"), "prompt": prompts}, optional=options)


def request_bodies() -> st.SearchStrategy[tuple[str, dict[str, Any]]]:
    """(kind, body) of either endpoint."""
    return st.one_of(
        st.tuples(st.just("chat"), chat_bodies()), st.tuples(st.just("completions"), completion_bodies())
    )


def honoured_caps(sent: dict[str, Any]) -> list[str | None]:
    """The cap fields ``sent`` sets, or ``[None]`` when it sets none."""
    return [name for name in CAP_FIELDS if sent.get(name) is not None] or [None]


def honest_usage(sent: dict[str, Any], honoured: str | None) -> tuple[int, int]:
    """The largest (prompt_tokens, completion_tokens) an honest upstream bills for ``sent``,
    honouring the cap field ``honoured`` (see the module docstring)."""
    text = sent["messages"] if "messages" in sent else sent["prompt"]
    prompt = len(orjson.dumps(text))
    rendered = [name for name in ("tools", "functions", "response_format") if sent.get(name)]
    if rendered:
        prompt += sum(len(orjson.dumps(sent[name])) for name in rendered) + TEMPLATE_TOKENS
    raw_prompt = sent.get("prompt")
    separate = isinstance(raw_prompt, list) and all(isinstance(p, str | list) for p in raw_prompt)
    completions = len(raw_prompt) if separate else 1
    best_of = sent.get("best_of")
    choices = max(sent.get("n") or 1, best_of if isinstance(best_of, int) and best_of > 0 else 1)
    value = sent.get(honoured) if honoured is not None else None
    cap = math.ceil(value) if isinstance(value, int | float) and value > 0 else DEFAULT_COMPLETION_BOUND
    return prompt, cap * choices * completions
