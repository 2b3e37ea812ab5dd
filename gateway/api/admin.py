"""Admin endpoints (admin key required): reload the policy now, see what is served, see and clear
the shift alarms (gateway.config.shift_alarm).

``create_app`` includes ``admin_router(state, gateway)``; the router closes over the app's own
SharedState and Gateway, so several apps in one process (tests, benchmarks) never see each other's state.
"""

from __future__ import annotations

from typing import Any

from fastapi import APIRouter, Header

from gateway.assembly.policy_store import PolicySourceUnavailableError
from gateway.assembly.runtime import Gateway
from gateway.assembly.state import SharedState
from gateway.wire.errors import PolicyReloadFailedError, PolicySourceDownError, UnknownTierRequestError
from policies import PolicyInvalidError


def admin_router(state: SharedState, gateway: Gateway | None = None) -> APIRouter:
    """``POST /admin/reload`` and ``GET /admin/policy`` bound to ``state``; with ``gateway``, also
    ``GET /admin/shift-alarms`` and ``POST /admin/shift-alarms/clear?tier=``."""
    router = APIRouter(prefix="/admin", tags=["admin"])
    if gateway is not None:
        _shift_alarm_routes(router, state, gateway)

    @router.post("/reload")
    async def reload_policy(authorization: str | None = Header(default=None)) -> dict[str, Any]:
        """Re-read the policy source now; 422 (last good kept) if the new policy is invalid."""
        state.authenticator.check_admin(authorization)
        previous = state.policy_store.current
        try:
            policy = await state.policy_store.reload()
        except PolicyInvalidError as exc:
            raise PolicyReloadFailedError(f"{exc}; still serving {_id(previous)}") from exc
        except PolicySourceUnavailableError as exc:
            raise PolicySourceDownError(f"{exc}; still serving {_id(previous)}") from exc
        except Exception as exc:  # the store turns every failure into the two above; never a 500
            raise PolicyReloadFailedError(
                f"policy reload failed ({type(exc).__name__}); still serving {_id(previous)}"
            ) from exc
        return {
            "policy_id": policy.policy_id,
            "previous_policy_id": previous.policy_id if previous else None,
            "changed": previous is None or previous.policy_id != policy.policy_id,
            **{k: v for k, v in state.policy_store.status().items() if k in ("source", "version")},
        }

    @router.get("/policy")
    async def policy_status(authorization: str | None = Header(default=None)) -> dict[str, Any]:
        """The served policy's id, source, version and reload history."""
        state.authenticator.check_admin(authorization)
        return state.policy_store.status()

    return router


def _shift_alarm_routes(router: APIRouter, state: SharedState, gateway: Gateway) -> None:
    """The shift alarm's two admin endpoints (docs/operations.md#shift-alarm)."""
    alarms = gateway.metrics.shift_alarms

    @router.get("/shift-alarms")
    async def shift_alarms(authorization: str | None = Header(default=None)) -> dict[str, Any]:
        """Per watched tier of the served policy: alarmed or not, its action, its last p-values."""
        state.authenticator.check_admin(authorization)
        return {"policy_id": alarms.policy_id, "tiers": alarms.status()}

    @router.post("/shift-alarms/clear")
    async def clear_shift_alarm(
        tier: str, authorization: str | None = Header(default=None)
    ) -> dict[str, Any]:
        """Clear ``tier``'s alarm on every replica (through Redis) and watch it afresh."""
        state.authenticator.check_admin(authorization)
        if tier not in alarms.status():
            raise UnknownTierRequestError(
                f"tier {tier!r} has no shift alarm in the served policy", param="tier"
            )
        shared = await gateway.shift_share.clear(tier) if gateway.shift_share is not None else None
        return {"tier": tier, "cleared": alarms.clear(tier), "shared": shared}


def _id(policy: Any) -> str:
    return f"policy {policy.policy_id}" if policy is not None else "no policy"
