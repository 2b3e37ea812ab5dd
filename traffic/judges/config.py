"""The judge part of the ``learning:`` config: one pydantic model per judge, picked by ``kind``."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Annotated, Any, Literal, cast

from pydantic import BaseModel, ConfigDict, Field, HttpUrl, TypeAdapter

from money import Price
from traffic.judges.base import Judge


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class ExactJudgeConfig(_Strict):
    """``{kind: exact}``: normalized text equality."""

    kind: Literal["exact"] = "exact"


class NumericJudgeConfig(_Strict):
    """``{kind: numeric, rel_tol}``: the last numbers agree."""

    kind: Literal["numeric"] = "numeric"
    rel_tol: float = Field(1e-6, ge=0, allow_inf_nan=False)


class ChoiceJudgeConfig(_Strict):
    """``{kind: choice, letters}``: the same answer letter."""

    kind: Literal["choice"] = "choice"
    letters: str = Field("ABCD", pattern=r"^[A-J]{2,10}$")


class SimilarityJudgeConfig(_Strict):
    """``{kind: similarity, threshold}``: cosine of all-MiniLM-L6-v2 embeddings >= threshold."""

    kind: Literal["similarity"] = "similarity"
    threshold: float = Field(0.8, ge=-1, le=1, allow_inf_nan=False)


class LLMJudgeConfig(_Strict):
    """``{kind: llm, base_url, model, ...}``: the reference model asked whether the answers agree."""

    kind: Literal["llm"] = "llm"
    base_url: HttpUrl
    model: str = Field(min_length=1)
    api_key_env: str | None = None
    price: Price = Field(description="what a call costs; required, never free by omission (money.prices)")
    timeout_s: float = Field(30.0, gt=0, allow_inf_nan=False)
    top_logprobs: int = Field(10, ge=2, le=20)


JudgeConfig = Annotated[
    ExactJudgeConfig | NumericJudgeConfig | ChoiceJudgeConfig | SimilarityJudgeConfig | LLMJudgeConfig,
    Field(discriminator="kind"),
]


def parse_judge_config(data: Mapping[str, object]) -> JudgeConfig:
    """The config of the judge ``data`` describes (``{"kind": "exact"}``, ...); pydantic's
    ValidationError names an unknown kind or a bad field."""
    # TypeAdapter takes a PEP 747 TypeForm, which mypy 1.x reads back from its incremental cache as
    # type[T] (python/mypy#21587): the union alias would then be rejected on every re-check but a
    # clean one. The explicit parameter keeps the result typed; the cast only hides the form.
    return TypeAdapter[JudgeConfig](cast(Any, JudgeConfig)).validate_python(data)


def make_judge(config: JudgeConfig) -> Judge:
    """The judge a config describes (the similarity model and the HTTP client load on first use)."""
    if isinstance(config, ExactJudgeConfig):
        from traffic.judges.text import ExactJudge

        return ExactJudge()
    if isinstance(config, NumericJudgeConfig):
        from traffic.judges.text import NumericJudge

        return NumericJudge(config.rel_tol)
    if isinstance(config, ChoiceJudgeConfig):
        from traffic.judges.text import ChoiceJudge

        return ChoiceJudge(config.letters)
    if isinstance(config, SimilarityJudgeConfig):
        from traffic.judges.similarity import SimilarityJudge

        return SimilarityJudge(config.threshold)
    from traffic.judges.llm import LLMJudge

    return LLMJudge(
        str(config.base_url),
        config.model,
        price=config.price,
        api_key_env=config.api_key_env,
        timeout_s=config.timeout_s,
        top_logprobs=config.top_logprobs,
    )
