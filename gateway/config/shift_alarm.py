"""The shift alarm: per tier, live traffic tested against the calibration's histograms, and what an
alarm does (docs/operations.md#shift-alarm, docs/contracts.md#shift-alarm).

For every tier the loaded policy's ``shift_reference`` describes (top level, text requests; a tier
that routes before generation is not watched: its cheap stage sees only what the router sends
it), a ``stats.shift_detector.ShiftDetector`` counts each served request's cheap-stage score bin
and whether it escalated (``observe``: one bisect over at most 99 edges and a few list
increments; a block's test, every ``window / blocks`` requests, is O(bins)). When it fires, the tier
is alarmed until an operator clears it (``clear``, ``POST /admin/shift-alarms/clear``) or a new
policy is loaded (another ``policy_id``). An alarmed tier with ``action: safe_route`` is served its
declared safe route (``safe_route``: ``strong``, the route's last model alone; ``buffered``, the
tier's cascade with its prefix commit rule off) by ``gateway.routing.safe_routes``; with ``notify``
only the gauge and the log line say so. Requests served while alarmed are not counted (the
alarm is latched). Replicas share alarms and clears through Redis
(``gateway.config.shift_alarm_share``).

Exported: ``cascade_shift_alarm{tier}`` (1 alarmed, 0 watched and quiet), for watched tiers only.
"""

from __future__ import annotations

import logging
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Literal

from prometheus_client.metrics_core import GaugeMetricFamily, Metric
from prometheus_client.registry import Collector
from pydantic import BaseModel, ConfigDict, Field, model_validator

from gateway.wire.logs import log_event
from policies import Policy
from policies.kinds import TOP_LEVEL_KIND
from policies.score_distribution import bin_index
from policies.shift_reference import TierShiftReference
from stats.shift_detector import ShiftDetector

ALARM_METRIC = "cascade_shift_alarm"
# Outcomes of a request whose cheap stage was scored and decided (the ones the detector counts).
_DECIDED = frozenset({"accepted", "escalated"})


class TierAlarmConfig(BaseModel):
    """What an alarm does to one tier."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    action: Literal["notify", "safe_route"] = Field(
        "notify", description="notify: the gauge and a log line only; safe_route: also serve the safe route"
    )
    safe_route: Literal["strong", "buffered"] = Field(
        "strong",
        description="strong: the tier's last model alone; buffered: its cascade without the prefix "
        "commit rule",
    )


class ShiftAlarmConfig(BaseModel):
    """Config section ``shift_alarm``: the detector's settings (measured in docs/operations.md#shift-alarm)
    and each tier's action (``default`` for tiers not listed)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    enabled: bool = True
    window: int = Field(400, ge=20, le=100_000, description="requests per test")
    blocks: int = Field(4, ge=1, le=100, description="tests per window of requests (window must divide)")
    alpha: float = Field(1e-5, gt=0, lt=0.5, description="level of the combined test at each check")
    combine: Literal["fisher", "bonferroni"] = "fisher"
    default: TierAlarmConfig = TierAlarmConfig()
    tiers: dict[str, TierAlarmConfig] = Field(default_factory=dict)

    @model_validator(mode="after")
    def _blocks_divide_the_window(self) -> ShiftAlarmConfig:
        if self.window % self.blocks or self.window < self.blocks:
            raise ValueError(f"shift_alarm.window {self.window} must be a multiple of blocks {self.blocks}")
        return self

    def for_tier(self, tier: str) -> TierAlarmConfig:
        """The action of ``tier``."""
        return self.tiers.get(tier, self.default)


@dataclass(slots=True)
class _Watch:
    """One watched tier: its reference model, score edges and detector."""

    model: str
    edges: list[float]
    detector: ShiftDetector


class ShiftAlarms(Collector):
    """The alarms of the served policy's tiers (see the module docstring), as a Prometheus collector."""

    def __init__(self, config: ShiftAlarmConfig | None = None):
        self.config = config or ShiftAlarmConfig()
        self.policy_id: str | None = None
        self._watches: dict[str, _Watch] = {}
        # Alarmed tiers: read by the request path (one truthiness check while empty).
        self.alarmed: set[str] = set()
        # Tiers alarmed here and not yet written to Redis (the share's refresh keeps them).
        self.unshared: set[str] = set()

    def reset(self, policy: Policy | None) -> None:
        """Watch ``policy``'s tiers afresh, unless it is the policy already watched (alarms cleared)."""
        policy_id = policy.policy_id if policy is not None else None
        if policy_id == self.policy_id:
            return
        self.policy_id = policy_id
        self._watches = {}
        self.alarmed = set()
        self.unshared = set()
        if policy is None or not self.config.enabled:
            return
        reference = policy.shift_reference
        if reference is None:
            log_event(
                "shift_alarm_off", level=logging.WARNING, policy_id=policy_id, reason="no shift_reference"
            )
            return
        unwatched = sorted(set(policy.tiers) - set(reference.tiers))
        for tier, tier_reference in reference.tiers.items():
            if policy.tiers[tier].routing is not None:
                unwatched.append(tier)
                continue
            self._watches[tier] = self._watch(tier_reference)
        if unwatched:
            log_event("shift_alarm_off", policy_id=policy_id, tiers=sorted(unwatched), reason="no reference")

    def _watch(self, reference: TierShiftReference) -> _Watch:
        c = self.config
        detector = ShiftDetector(
            [reference.score.counts, reference.escalation], c.window, c.blocks, c.alpha, c.combine
        )
        return _Watch(reference.model, list(reference.score.edges), detector)

    def observe(
        self,
        policy_id: str,
        tier: str,
        kind: str,
        outcome: str,
        model: str,
        score: float | None,
        escalated: bool,
    ) -> bool:
        """Count one served request of ``tier`` whose first stage ``model`` scored ``score``; True when
        it sets off the tier's alarm. Ignored for another policy, kind, model or an alarmed tier."""
        watch = self._watches.get(tier)
        if watch is None or policy_id != self.policy_id or kind != TOP_LEVEL_KIND or tier in self.alarmed:
            return False
        if outcome not in _DECIDED or model != watch.model:
            return False
        score_bin = 0 if score is None else bin_index(watch.edges, score)
        if not watch.detector.observe((score_bin, 1 if escalated else 0)):
            return False
        self.alarmed.add(tier)
        self.unshared.add(tier)
        log_event(
            "shift_alarm",
            level=logging.WARNING,
            policy_id=policy_id,
            tier=tier,
            action=self.config.for_tier(tier).action,
            p_values=[round(p, 12) for p in watch.detector.last_p_values],
        )
        return True

    def adopt(self, shared: set[str]) -> None:
        """The replicas' alarmed tiers (read from Redis): adopt their alarms, and their clears of
        alarms this replica has already shared (its detector starts afresh)."""
        for tier in (shared | self.unshared) - self.alarmed:
            if tier in self._watches:
                self.alarmed.add(tier)
                log_event("shift_alarm_adopted", policy_id=self.policy_id, tier=tier)
        for tier in self.alarmed - shared - self.unshared:
            self._clear_local(tier)

    def clear(self, tier: str) -> bool:
        """An operator cleared ``tier``'s alarm here: whether it was alarmed (its detector starts afresh)."""
        self.unshared.discard(tier)
        return self._clear_local(tier)

    def _clear_local(self, tier: str) -> bool:
        watch = self._watches.get(tier)
        if watch is not None:
            watch.detector.reset()
        if tier not in self.alarmed:
            return False
        self.alarmed.discard(tier)
        log_event("shift_alarm_cleared", policy_id=self.policy_id, tier=tier)
        return True

    def status(self) -> dict[str, dict[str, object]]:
        """Per watched tier: alarmed or not, its action, and its window's last p-values."""
        return {
            tier: {
                "alarmed": tier in self.alarmed,
                "action": self.config.for_tier(tier).model_dump(),
                "last_p_values": list(watch.detector.last_p_values),
            }
            for tier, watch in self._watches.items()
        }

    def describe(self) -> Iterator[Metric]:
        """The gauge family, without samples."""
        yield self._family()

    def collect(self) -> Iterator[Metric]:
        """1 per alarmed watched tier, 0 per quiet one."""
        family = self._family()
        for tier in self._watches:
            family.add_metric([tier], 1.0 if tier in self.alarmed else 0.0)
        yield family

    @staticmethod
    def _family() -> GaugeMetricFamily:
        return GaugeMetricFamily(
            ALARM_METRIC, "Whether the tier's shift alarm is set (1) or quiet (0).", labels=["tier"]
        )
