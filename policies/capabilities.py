"""What a model can give a scorer, and whether a policy's scorer asks more of a model than it gives.

A gateway config declares each model's ``capabilities`` (docs/contracts.md#config): whether it
returns token logprobs at all, the largest ``top_logprobs`` it accepts, the request form it wants
them asked in, how it writes function calls (``tool_calls``, read by
``gateway.stages.answer_review``), and whether it continues a last assistant message
(``continue_assistant``, in ``continue_form``: gateway.streaming.stream_finish). The gateway asks
every model for logprobs in its form and within its cap (``logprob_fields``), and refuses (``cascade
serve``, ``cascade policy push``, every hot reload) a policy whose scorer needs more than a scored
model gives (``capability_problems``): a scorer that reads logprobs on a scored stage whose model
has none, or one that reads K alternatives per position on a model that gives fewer. A stage that
cannot be scored would otherwise follow ``on_missing_score`` on every request: escalate everything
(or accept everything), silently.

Only the stages before the last are scored; the last stage's model needs nothing. Scorers that
need no logprobs from the scored model (the black-box ones) are accepted on any model; a scorer's
own model (the verifier's) must return logprobs (``scorer_needs``).
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, model_validator

from policies.schema import Policy, ScorerSpec
from policies.scorers import REGISTRY


class ModelCapabilities(BaseModel):
    """What one upstream model returns and accepts: token logprobs, the form of its function calls,
    and whether it continues a last assistant message."""

    # A typo in a hand-written config must be an error, not a silently ignored key.
    model_config = ConfigDict(extra="forbid", frozen=True)

    logprobs: bool = Field(
        True,
        description="the model returns token logprobs; false: the gateway never asks it for any "
        "(some APIs refuse a request carrying the fields) and no logprob scorer may score it",
    )
    max_top_logprobs: int | None = Field(
        None,
        ge=0,
        description="most alternatives per position it gives (and accepts as top_logprobs); null = no cap",
    )
    logprobs_form: Literal["chat", "integer"] = Field(
        "chat",
        description="chat: `logprobs: true, top_logprobs: K` on chat completions; integer: `logprobs: K`",
    )

    tool_calls: Literal["native", "content"] = Field(
        "native",
        description="how the model writes function calls: native (message.tool_calls) or content "
        "(JSON in message.content, normalized into tool_calls by the gateway; docs/tool-calls.md)",
    )

    continue_assistant: bool = Field(
        False,
        description="the model continues a last assistant message (a prefill) instead of answering "
        "it: a committed prefix stream that breaks is finished by it (docs/contracts.md#faults)",
    )
    continue_form: Literal["prefill", "continue_final_message"] = Field(
        "prefill",
        description="prefill: the last assistant message alone is continued (llama.cpp's llama-server); "
        "continue_final_message: also `continue_final_message: true, add_generation_prompt: false` (vLLM)",
    )

    @model_validator(mode="after")
    def _cap_needs_logprobs(self) -> ModelCapabilities:
        if not self.logprobs and self.max_top_logprobs is not None:
            raise ValueError("max_top_logprobs is set on a model declared without logprobs")
        return self

    def alternatives(self, wanted: int) -> int:
        """``wanted`` alternatives per position, cut to the model's cap."""
        return wanted if self.max_top_logprobs is None else min(wanted, self.max_top_logprobs)


def logprob_fields(capabilities: ModelCapabilities, alternatives: int, *, chat: bool) -> dict[str, Any]:
    """The request fields asking ``capabilities``' model for logprobs with ``alternatives`` per position.

    In the model's form and within its cap; ``{}`` for a model without logprobs. Legacy
    ``/v1/completions`` takes ``logprobs: K`` whatever the form. The integer form asks at least one
    alternative: a provider reading ``logprobs`` as a count may take 0 for "none".
    """
    if not capabilities.logprobs:
        return {}
    k = capabilities.alternatives(max(alternatives, 0))
    if not chat:
        return {"logprobs": k}
    if capabilities.logprobs_form == "integer":
        return {"logprobs": max(k, 1)}
    return {"logprobs": True, "top_logprobs": k}


@dataclass(frozen=True, slots=True)
class Need:
    """What a scorer needs from one model: its logprobs, and at least ``alternatives`` per position."""

    model: str
    logprobs: bool = True
    alternatives: int = 0
    role: str = "scored"  # "scored" (a stage's model) or the scorer whose own model it is


def scorer_needs(scorer: ScorerSpec, scored: str) -> list[Need]:
    """What ``scorer`` (a ``ScorerSpec``) needs of the models it involves when it scores ``scored``.

    Read from its definition (``policies.scorers.REGISTRY``): a logprob scorer needs the scored
    model's logprobs, and its ``top_k`` alternatives per position when its score is made of them
    (``ScorerDefinition.alternatives``; the chosen-token scorers read no alternatives, so a cap
    does not change their score). A black-box scorer needs nothing of the scored model; one that
    calls its own model (``Calls.own_model``, the verifier) needs that model's logprobs with
    ``top_k`` alternatives (its score is read among them). A scorer unknown here is taken to need
    logprobs (refusing a policy is visible, escalating every request is not). ``external`` is
    refused elsewhere (``publishing.check_servable``) and needs nothing here.
    """
    name = str(scorer.name)
    if name == "external":
        return []
    definition = REGISTRY.get(name)
    if definition is not None and definition.calls is not None:  # the scored model may give no logprobs
        own = scorer.own_model
        return [] if own is None else [Need(own, alternatives=int(scorer.top_k), role=name)]
    alternatives = int(scorer.top_k) if definition is None or definition.alternatives else 0
    return [Need(scored, alternatives=alternatives)]


def shortfall(scorer: ScorerSpec, need: Need, capabilities: ModelCapabilities) -> str | None:
    """What ``capabilities`` lacks for ``need`` (one clause naming the model), or None."""
    who = f"model {need.model}" if need.role == "scored" else f"{need.role} model {need.model}"
    if need.logprobs and not capabilities.logprobs:
        return (
            f"{who} is declared without logprobs (capabilities.logprobs: false) "
            f"and scorer {scorer.name} needs them"
        )
    cap = capabilities.max_top_logprobs
    if cap is not None and need.alternatives > cap:
        return (
            f"scorer {scorer.name} reads top_k {need.alternatives} alternatives per position and {who} "
            f"gives at most {cap} (capabilities.max_top_logprobs)"
        )
    return None


def stage_problems(
    scorer: ScorerSpec, stages: Sequence[str], capabilities: Mapping[str, ModelCapabilities]
) -> list[str]:
    """What the models of one chain (a route or envelope point) lack for ``scorer``, one clause each.

    Every stage but the last is scored. A stage model absent from ``capabilities`` is not checked
    here (a route to an unconfigured model is refused by ``check_servable`` on its own); a scorer's
    own model (the verifier's) absent from them is a problem: the gateway could not call it.
    """
    problems = []
    for scored in stages[:-1]:
        for need in scorer_needs(scorer, scored):
            declared = capabilities.get(need.model)
            if declared is None and need.role != "scored":
                problem: str | None = f"{need.role} model {need.model} is not a configured model"
            else:
                problem = None if declared is None else shortfall(scorer, need, declared)
            if problem is not None and problem not in problems:
                problems.append(problem)
    return problems


def _chains(section: Any, where: str, scorer: ScorerSpec) -> Iterator[tuple[str, list[str], ScorerSpec]]:
    """(where, models, scorer) of every route of every scored tier (not ``fallback``; the tier's
    own scorer, else ``scorer``) and every envelope point of a policy section."""
    for name, tier in section.tiers.items():
        if tier.mechanism == "fallback":
            continue  # nothing is scored: no capability is needed
        for i, route in enumerate(tier.routes):
            label = f"{where}tier {name!r} route {i + 1} ({' -> '.join(route.models)})"
            yield label, route.models, tier.scorer or scorer
    for i, point in enumerate(section.envelope or ()):
        yield f"{where}envelope point {i + 1} ({' -> '.join(point.models)})", point.models, scorer


def _sections(policy: Policy) -> Iterable[tuple[str, ScorerSpec, Any]]:
    """(where, scorer, section): the policy's top level, then each request kind's own section."""
    yield "", policy.scorer, policy
    for kind, section in (policy.kinds or {}).items():
        yield f"kind {kind} ", section.scorer or policy.scorer, section


def capability_problems(policy: Policy, capabilities: Mapping[str, ModelCapabilities]) -> list[str]:
    """Every route of ``policy`` (a ``Policy``) whose scorer needs more than a scored model gives.

    One line each: where (tier and route, or envelope point; with the request kind for a kind's
    own section), then what is missing and from which model. Empty when the policy can be served.
    """
    problems = []
    for where, scorer, section in _sections(policy):
        for chain, models, chain_scorer in _chains(section, where, scorer):
            problems += [
                f"{chain}: {problem}" for problem in stage_problems(chain_scorer, models, capabilities)
            ]
    return problems
