"""Gateway settings: a YAML file, overridable by ``CASCADE_*`` environment variables.

Every field is listed in docs/contracts.md#config.

Settings say *how to run* (upstream URLs, key references, timeouts, limits); the policy file says
*what to do* (tiers, routes, thresholds). Secrets appear only by reference (``api_key_env``): the
settings object never holds a key, and ``ModelConfig.api_key()`` reads it when a client is built.

Environment overrides use the ``CASCADE_`` prefix and ``__`` for nesting, e.g.
``CASCADE_POLICY=redis://127.0.0.1:6379/0``, ``CASCADE_REDIS_URL=...``,
``CASCADE_LIMITS__MAX_BODY_BYTES=65536``. They win over the YAML file.
"""

from __future__ import annotations

import os
from functools import cached_property
from pathlib import Path
from typing import Any, Literal

import yaml
from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    IPvAnyNetwork,
    ValidationError,
    field_validator,
    model_validator,
)
from pydantic_settings import BaseSettings, PydanticBaseSettingsSource, SettingsConfigDict

from gateway.config.console import ConsoleConfig
from gateway.config.coverage import CoverageConfig
from gateway.config.drift import DriftConfig
from gateway.config.fail_over import BreakerPolicy, RetryPolicy
from gateway.config.key_settings import BudgetPeriod, RateLimit
from gateway.config.learning import LearningConfig
from gateway.redis.keys import is_redis_url
from money import Price
from money.charges import DEFAULT_COMPLETION_BOUND, CallLimits
from policies.capabilities import ModelCapabilities
from policies.request_defaults import RequestDefaults
from redaction import url_secrets

# Model names clients may not use for a configured model: they are the cascade aliases.
RESERVED_MODEL_PREFIX = "cascade"


class ConfigError(Exception):
    """The gateway config is missing, unreadable or invalid; the message is one line."""


class _Section(BaseModel):
    # A typo in a hand-written config must be an error, not a silently ignored key.
    model_config = ConfigDict(extra="forbid", frozen=True)


class PartTokens(_Section):
    """Prompt tokens one content part of each kind may be billed (null: no bound is declared).

    Providers price an image by its pixels (OpenAI: up to 765 tokens and more for a high-detail
    tile grid; Anthropic: about 1,600 for a large image), audio by its length and a file by its
    pages: the bytes of a URL say nothing of it, so a model states its bound here."""

    image: int | None = Field(None, ge=0, description="tokens per image part (image_url)")
    audio: int | None = Field(None, ge=0, description="tokens per audio part (input_audio)")
    file: int | None = Field(None, ge=0, description="tokens per file part (file)")

    def declared(self) -> dict[str, int]:
        """The declared bounds by part kind (``money.charges.PART_KINDS``)."""
        return {
            k: v
            for k, v in (("image", self.image), ("audio", self.audio), ("file", self.file))
            if v is not None
        }


class ModelConfig(_Section):
    """One upstream model served by an OpenAI-compatible endpoint."""

    base_url: str = Field(description="OpenAI-compatible base URL, e.g. http://127.0.0.1:9001/v1")
    model: str = Field(min_length=1, description="the upstream's model id")
    api_key_env: str | None = Field(None, description="name of the env var holding the upstream key")
    price: Price = Field(description="what a call costs (money/prices.py); required, never free by omission")
    timeout_s: float = Field(30.0, gt=0, description="per upstream call, seconds")
    first_token_timeout_s: float | None = Field(
        None,
        gt=0,
        description="a stage of this model whose first token has not arrived this many seconds after "
        "its call began is cancelled (and charged) and the request goes on to the next stage "
        "(slow_first_token); its stages are then requested streamed; unset: no such deadline",
    )
    max_retries: int = Field(2, ge=0, le=10, description="retries for 429/5xx/connect errors")
    retry: RetryPolicy = Field(
        default_factory=lambda: RetryPolicy(),
        description="backoff, Retry-After cap, retry deadline, uncertain retries (gateway.config.fail_over)",
    )
    breaker: BreakerPolicy = Field(
        default_factory=lambda: BreakerPolicy(),
        description="when the model's circuit opens and for how long (gateway.config.fail_over)",
    )
    request_defaults: RequestDefaults | None = Field(
        None, description="fields merged under the client's own (policies/request_defaults.py)"
    )
    capabilities: ModelCapabilities = Field(
        ModelCapabilities(),
        description="what it returns about logprobs and how it writes calls (policies/capabilities.py)",
    )
    default_max_tokens: int = Field(
        DEFAULT_COMPLETION_BOUND,
        gt=0,
        description="completion cap sent (as max_tokens) when neither the client nor request_defaults "
        "set one; the spend reservation assumes exactly this cap",
    )
    part_tokens: PartTokens = Field(
        default_factory=lambda: PartTokens(),
        description="prompt tokens one image, audio or file part may be billed; a request carrying a "
        "part of a kind left unset is refused (400) on a route through this model",
    )
    cancel_overrun_tokens: int | None = Field(
        None,
        ge=0,
        description="completion tokens this upstream may still generate, and bill, after the gateway "
        "closes a stream (a prefix tier's rejected cheap stage): that stream is charged the chunks read "
        "plus this many, within its cap; unset: its worst case (the cap sent)",
    )

    @model_validator(mode="before")
    @classmethod
    def _priced(cls, data: Any) -> Any:
        """A model without ``price`` is an error, as a price without a form is (``money.prices``):
        it would silently be free. A model that costs nothing says so: ``{per_query_usd: 0}``."""
        if isinstance(data, dict) and data.get("price") is None:
            raise ValueError(
                "price is required (a model without one would be free); "
                "a free model says price: {per_query_usd: 0}"
            )
        return data

    @model_validator(mode="before")
    @classmethod
    def _tool_calls_is_a_capability(cls, data: Any) -> Any:
        """``tool_calls`` beside ``capabilities`` (where configs written before it moved have it) is
        read as ``capabilities.tool_calls``; both set is an error, even when they agree."""
        if not isinstance(data, dict) or "tool_calls" not in data:
            return data
        data = dict(data)
        form = data.pop("tool_calls")
        capabilities = data.get("capabilities")
        if isinstance(capabilities, ModelCapabilities):
            capabilities = capabilities.model_dump(exclude_unset=True)
        if capabilities is None:
            capabilities = {}
        if not isinstance(capabilities, dict):
            return data  # the capabilities' own validation reports it
        if "tool_calls" in capabilities:
            raise ValueError("tool_calls is set twice: keep capabilities.tool_calls only")
        data["capabilities"] = {**capabilities, "tool_calls": form}
        return data

    @model_validator(mode="after")
    def _first_token_within_timeout(self) -> ModelConfig:
        """A first-token deadline past ``timeout_s`` could never fire: a mistake, not a setting."""
        if self.first_token_timeout_s is not None and self.first_token_timeout_s >= self.timeout_s:
            raise ValueError(
                f"first_token_timeout_s ({self.first_token_timeout_s:g}) must be below timeout_s "
                f"({self.timeout_s:g})"
            )
        return self

    @field_validator("base_url")
    @classmethod
    def _http_url(cls, value: str) -> str:
        if not value.startswith(("http://", "https://")):
            raise ValueError(f"base_url must start with http:// or https://, got {value!r}")
        return value.rstrip("/")

    @property
    def upstream(self) -> tuple[str, str]:
        """What serves this model: its endpoint and model id. Two pool members of one llama-server
        share it, and with it the server's queue and the request's deadline (gateway.engine.cascade)."""
        return (self.base_url, self.model)

    def api_key(self) -> str | None:
        """The upstream key, read from the environment at call-site (never stored in settings)."""
        return os.environ.get(self.api_key_env) if self.api_key_env else None

    @property
    def billed_attempts(self) -> int:
        """Attempts of one call that may each be billed: ``max_retries + 1`` when uncertain attempts
        are retried (each is charged its worst case), else 1 (a retry follows only an attempt that
        provably was not served). The reservation holds this many worst cases of a call."""
        return self.max_retries + 1 if self.retry.uncertain else 1

    @cached_property
    def limits(self) -> CallLimits:
        """What bounds this model's calls beyond the request bytes (``money.charges``)."""
        return CallLimits(self.default_max_tokens, self.part_tokens.declared(), self.cancel_overrun_tokens)


class AuthConfig(_Section):
    """Where client and admin keys come from (env var names), and whether no key at all means open.

    ``open: true`` serves every caller while no client key exists anywhere; with ``open: false``
    (the default) an empty key store refuses every request (401), so losing Redis's data never
    opens the gateway by accident.
    """

    api_keys_env: str | None = "CASCADE_API_KEYS"
    admin_key_env: str | None = "CASCADE_ADMIN_KEY"
    open: bool = False
    failure_limit: int = Field(
        20,
        ge=0,
        description="refused keys per address within failure_window_s after which the address gets 429 "
        "too_many_auth_failures for its refused keys until the window ends (every key is still checked and "
        "a valid one served); 0: never",
    )
    failure_window_s: float = Field(60.0, gt=0)


class BudgetConfig(_Section):
    """Default per-client-key spend limit over a fixed window (None = unlimited), and what to do
    while Redis cannot be reached (docs/redis-and-auth.md, "When Redis goes away")."""

    limit_usd: float | None = Field(None, ge=0)
    window_s: int = Field(86400, gt=0)
    on_redis_down: Literal["local", "refuse"] = Field(
        "local",
        description="local: each replica enforces limits in process and writes the spend back to Redis "
        "when it returns; refuse: keyed requests get 503 spend_unavailable while spend cannot be checked",
    )
    outage_share: float = Field(
        1.0,
        gt=0,
        le=1,
        description="share of a key's remaining budget one replica may admit on its own "
        "during an outage (1/N for N replicas: never above the limit)",
    )
    outage_after_s: float = Field(
        0.5,
        gt=0,
        le=30,
        description="how long Redis must fail to answer before a replica decides limits in process "
        "(degraded mode); until then a failed call is tried again and the request waits "
        "(gateway.keys.outage)",
    )
    rate_limits: list[RateLimit] = Field(
        default_factory=list,
        description="default request/token rate limits of a key without its own: "
        "[{window_s, requests, tokens}, ...] (gateway.keys.rate_limits)",
    )
    period: BudgetPeriod | None = Field(
        None,
        description="default budget period of a key without its own: {kind: none|daily|weekly|monthly, "
        "timezone, rollover_cap_usd}; null: the fixed window_s window",
    )


class LimitsConfig(_Section):
    """Request limits."""

    max_body_bytes: int = Field(1_048_576, gt=0)
    request_timeout_s: float = Field(120.0, gt=0, description="deadline of a whole request, seconds")
    shutdown_grace_s: float = Field(
        20.0,
        ge=0,
        description="on SIGTERM/SIGINT, how long in-flight requests may finish before open ones are ended",
    )
    header_timeout_s: float = Field(
        10.0, gt=0, description="a request's line and headers must arrive within this (slowloris guard)"
    )
    body_timeout_s: float = Field(
        30.0, gt=0, description="a request's body must arrive within this many seconds of its headers"
    )
    max_header_bytes: int = Field(
        65_536, ge=1024, description="largest request head (request line and headers), bytes; over it: 431"
    )
    max_headers: int = Field(100, ge=8, description="most header fields in one request; over it: 431")
    stream_start_after_s: float | None = Field(
        20.0,
        gt=0,
        description="a streamed response not started within this many seconds starts anyway (200, "
        "the headers known so far) and is kept alive until its first event (gateway.streaming.early_start); "
        "null: a stream starts only with its first event",
    )
    stream_keepalive_s: float = Field(
        5.0, gt=0, description="interval of the keep-alive of a stream started early, seconds"
    )


class LoggingConfig(_Section):
    """Structured log settings; prompts are never logged unless ``log_prompts`` is true."""

    level: Literal["debug", "info", "warning", "error"] = "info"
    log_prompts: bool = False

    @field_validator("level", mode="before")
    @classmethod
    def _lower(cls, value: Any) -> Any:
        return value.lower() if isinstance(value, str) else value


class UpstreamErrorsConfig(_Section):
    """What an upstream's refusal of a request does at a stage (docs/contracts.md#upstream-errors)."""

    content_policy: Literal["return", "escalate"] = Field(
        "return",
        description="a provider's content-policy refusal (gateway.upstream.provider_errors): `return` it to "
        "the client at once, or `escalate` to the next stage like any failed call",
    )


class Settings(BaseSettings):
    """The whole gateway config (docs/contracts.md#config)."""

    model_config = SettingsConfigDict(
        env_prefix="CASCADE_", env_nested_delimiter="__", extra="forbid", frozen=True
    )

    models: dict[str, ModelConfig] = Field(min_length=1)
    policy: str = Field(description="policy file path, or redis://host:6379/0 (key cascade:policy:current)")
    redis_url: str | None = None
    redis_timeout_s: float = Field(
        0.1, gt=0, le=5, description="bound of every Redis call on the request path (keys, spend), seconds"
    )
    trusted_proxies: tuple[IPvAnyNetwork, ...] = Field(
        (),
        description="addresses or CIDR networks of the proxies in front of the gateway whose "
        "X-Forwarded-For is believed (right-most untrusted entry); empty: the connection's peer is "
        "the client (gateway.keys.client_address)",
    )
    auth: AuthConfig = AuthConfig()
    budgets: BudgetConfig = BudgetConfig()
    limits: LimitsConfig = LimitsConfig()
    logging: LoggingConfig = LoggingConfig()
    upstream_errors: UpstreamErrorsConfig = UpstreamErrorsConfig()
    drift: DriftConfig = DriftConfig()
    learning: LearningConfig = LearningConfig()
    # The operator console: request records and the /console pages (gateway.console).
    console: ConsoleConfig = ConsoleConfig()
    # What the policy was calibrated on; other cascade requests go to one model directly
    # (gateway.config.coverage).
    coverage: CoverageConfig = CoverageConfig()
    probe_capabilities: bool = Field(
        False,
        description="at `cascade serve` start, call each model once (`cascade models check`) and refuse "
        "to serve if one is unreachable or disagrees with its declared capabilities",
    )

    @field_validator("redis_url")
    @classmethod
    def _redis_url_parses(cls, value: str | None) -> str | None:
        if value is not None:
            check_redis_url(value)
        return value

    @field_validator("policy")
    @classmethod
    def _policy_url_parses(cls, value: str) -> str:
        if is_redis_url(value):
            check_redis_url(value)
        return value

    @field_validator("models")
    @classmethod
    def _names_not_reserved(cls, models: dict[str, ModelConfig]) -> dict[str, ModelConfig]:
        for name in models:
            if name == RESERVED_MODEL_PREFIX or name.startswith(RESERVED_MODEL_PREFIX + "/"):
                raise ValueError(f"model name {name!r} is reserved for the cascade aliases")
        return models

    @model_validator(mode="after")
    def _reference_is_configured(self) -> Settings:
        reference = self.learning.reference_model
        if reference is not None and reference not in self.models:
            raise ValueError(
                f"learning.reference_model {reference!r} is not a configured model "
                f"(configured: {', '.join(sorted(self.models))})"
            )
        if self.coverage.otherwise is not None and self.coverage.otherwise not in self.models:
            raise ValueError(
                f"coverage.otherwise {self.coverage.otherwise!r} is not a configured model "
                f"(configured: {', '.join(sorted(self.models))})"
            )
        return self

    def secret_values(self) -> list[str]:
        """Every secret this config refers to, read now: upstream keys, client and admin keys, the
        judge's key, and the passwords in every configured URL (``redaction.Redactor``)."""
        values: list[str] = []
        for model in self.models.values():
            values.append(model.api_key() or "")
            values.extend(url_secrets(model.base_url))
        for env in (self.auth.api_keys_env, self.auth.admin_key_env):
            values.extend(k.strip() for k in (os.environ.get(env or "") or "").split(","))
        judge = self.learning.judge
        judge_key_env = getattr(judge, "api_key_env", None)
        if judge_key_env:
            values.append(os.environ.get(judge_key_env) or "")
        for url in (self.redis_url, self.policy, self.learning.store, str(getattr(judge, "base_url", ""))):
            values.extend(url_secrets(url))
        return [v for v in values if v]

    @classmethod
    def settings_customise_sources(
        cls,
        settings_cls: type[BaseSettings],
        init_settings: PydanticBaseSettingsSource,
        env_settings: PydanticBaseSettingsSource,
        dotenv_settings: PydanticBaseSettingsSource,
        file_secret_settings: PydanticBaseSettingsSource,
    ) -> tuple[PydanticBaseSettingsSource, ...]:
        # Environment beats the YAML file (passed as init kwargs): operators override per deploy.
        return env_settings, init_settings

    def model_capabilities(self) -> dict[str, ModelCapabilities]:
        """Every configured model's declared capabilities, by model name (the policy checks use them)."""
        return {name: model.capabilities for name, model in self.models.items()}

    @property
    def policy_is_redis(self) -> bool:
        """True when the policy is read from Redis rather than a file."""
        return is_redis_url(self.policy)

    @classmethod
    def from_yaml(cls, path: str | Path) -> Settings:
        """Load a YAML config, apply ``CASCADE_*`` overrides, validate; ConfigError on any problem.

        A relative policy file path (and a relative ``learning.store`` file path) in the YAML is
        resolved against the YAML file's directory.
        """
        path = Path(path)
        try:
            document = yaml.safe_load(path.read_text()) or {}
        except OSError as exc:
            raise ConfigError(f"{path}: cannot read config ({exc.strerror})") from exc
        except yaml.YAMLError as exc:
            raise ConfigError(f"{path}: not valid YAML ({_one_line(str(exc))})") from exc
        if not isinstance(document, dict):
            raise ConfigError(f"{path}: the config must be a YAML mapping")
        policy = document.get("policy")
        if isinstance(policy, str) and "://" not in policy and not Path(policy).is_absolute():
            document["policy"] = str((path.parent / policy).resolve())
        learning = document.get("learning")
        if isinstance(learning, dict):
            store = learning.get("store")
            if isinstance(store, str) and ":" not in store and not Path(store).is_absolute():
                learning["store"] = str((path.parent / store).resolve())  # a traffic file beside the config
        return cls.from_mapping(document, source=str(path))

    @classmethod
    def from_mapping(cls, document: dict[str, Any], source: str = "<config>") -> Settings:
        """Validate a config mapping (plus env overrides); ConfigError with a one-line reason."""
        try:
            return cls(**document)
        except ValidationError as exc:
            first = exc.errors()[0]
            where = ".".join(str(p) for p in first["loc"]) or "<root>"
            more = f" (+{exc.error_count() - 1} more)" if exc.error_count() > 1 else ""
            raise ConfigError(f"{source}: {where}: {first['msg']}{more}") from exc


def check_redis_url(url: str) -> None:
    """Raise ValueError (a one-line reason, never the password) unless redis-py can use ``url``.

    Checked when the config loads, so a malformed URL stops ``cascade serve`` before it serves
    (exit 2) instead of failing later inside uvicorn's start-up with a traceback.
    """
    from redis.connection import parse_url

    if not is_redis_url(url):
        raise ValueError("a Redis URL must start with redis://, rediss:// or unix://")
    try:
        options = parse_url(url)
    except (ValueError, TypeError) as exc:
        raise ValueError(f"not a usable Redis URL ({_one_line(str(exc))[:200]})") from None
    scheme, _, rest = url.partition("://")
    database = rest.partition("?")[0].partition("/")[2] if scheme != "unix" else ""
    if database and not database.isdigit():
        raise ValueError(f"the database of a Redis URL must be a number, got {database[:40]!r}")
    if scheme != "unix" and not options.get("host"):
        raise ValueError("a Redis URL needs a host, e.g. redis://127.0.0.1:6379/0")


def _one_line(text: str) -> str:
    return " ".join(text.split())
