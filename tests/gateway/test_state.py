"""build_shared_state wiring: which Redis holds what, readiness without and with Redis."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import redis

from gateway.assembly.policy_store import FilePolicyStore, RedisPolicyStore
from gateway.assembly.state import SharedState, build_shared_state
from gateway.config.settings import Settings
from gateway.keys.auth import ClientIdentity
from policies import build_policy, load_policy, save_policy
from publishing import push_policy
from tests.support.policy_files import two_model_document
from tests.support.shared_redis import REDIS_URL

MODELS = {
    "small": {"base_url": "http://127.0.0.1:9/v1", "model": "s", "price": {"per_query_usd": 0.001}},
    "large": {"base_url": "http://127.0.0.1:9/v1", "model": "l", "price": {"per_query_usd": 0.01}},
}
POLICY = two_model_document(
    small_cost_usd=0.001, large_cost_usd=0.01, max_cost_usd=0.006, expected_cost_usd=0.005
)


@pytest.fixture(autouse=True)
def clean_env(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in ("CASCADE_API_KEYS", "CASCADE_ADMIN_KEY", "CASCADE_POLICY", "CASCADE_REDIS_URL"):
        monkeypatch.delenv(name, raising=False)


@pytest.fixture
def policy_path(tmp_path: Path) -> Path:
    path = tmp_path / "policy.json"
    save_policy(build_policy(POLICY), path)
    return path


def settings(**document: Any) -> Settings:
    return Settings.from_mapping({"models": MODELS, **document})


def shared_state(settings: Settings, **hooks: Any) -> SharedState:
    """build_shared_state with the config fields it takes, as gateway.api.app.build_gateway passes them."""
    return build_shared_state(
        policy=settings.policy,
        redis_url=settings.redis_url,
        redis_timeout_s=settings.redis_timeout_s,
        auth=settings.auth,
        budgets=settings.budgets,
        known_models=list(settings.models),
        **hooks,
    )


async def test_without_redis_everything_is_in_process(policy_path: Path) -> None:
    loaded: list[str] = []
    state = shared_state(
        settings(policy=str(policy_path), budgets={"limit_usd": 0.02}, auth={"open": True}),
        on_policy_loaded=lambda p: loaded.append(p.policy_id),
        on_policy_failure=lambda m: None,
    )
    await state.start()
    try:
        assert isinstance(state.policy_store, FilePolicyStore) and state.redis is None
        assert loaded == [state.policy_store.current.policy_id]
        ready = state.readiness()
        assert ready["policy"] is True and ready["redis"] is None and ready["policy_stale"] is False
        assert ready["auth_open"] is True
        identity = await state.authenticator.authenticate(None)
        assert await state.spend.reserve(identity, 1.0) is None  # no key: not metered
    finally:
        await state.close()


async def test_a_redis_policy_url_alone_also_holds_keys_and_spend(
    policy_path: Path, keys, monkeypatch: pytest.MonkeyPatch
) -> None:
    client = redis.Redis.from_url(REDIS_URL, decode_responses=True)
    push_policy(client, load_policy(policy_path), keys)
    client.close()
    monkeypatch.setenv("CASCADE_API_KEYS", "sk-one")
    state = shared_state(
        settings(policy=REDIS_URL, budgets={"limit_usd": 0.02, "window_s": 60}),
        on_policy_loaded=lambda p: None,
        on_policy_failure=lambda m: None,
    )
    await state.start()
    try:
        assert isinstance(state.policy_store, RedisPolicyStore)
        assert state.redis is not None and state.policy_redis is None  # one client for everything
        identity = await state.authenticator.authenticate("Bearer sk-one")
        assert identity == ClientIdentity(identity.key_id, 0.02)
        reservation = await state.spend.reserve(identity, 0.011)
        assert reservation.backend == "redis"
        assert await state.redis.exists(keys.spend(identity.key_id, reservation.window_start)) == 1
        ready = state.readiness()
        assert ready["redis"] is True and ready["policy_version"] == 1 and ready["policy_source"] == "redis"
    finally:
        await state.close()


async def test_a_file_policy_with_redis_url_shares_only_keys_and_spend(policy_path: Path, keys) -> None:
    state = shared_state(
        settings(policy=str(policy_path), redis_url=REDIS_URL),
        on_policy_loaded=lambda p: None,
        on_policy_failure=lambda m: None,
    )
    await state.start()
    try:
        assert isinstance(state.policy_store, FilePolicyStore)
        assert state.redis is not None
        assert state.redis_up is True
    finally:
        await state.close()
