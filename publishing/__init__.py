"""Publishing a policy in Redis: the key names, what may be served, and the push itself.

Shared by ``cascade policy push`` (gateway) and ``cascade recalibrate`` (calibration), which never
import each other: one mechanism, one validation. Redis itself is not imported here (the contract
package installs without it); the functions take a synchronous redis-py client
(``decode_responses=True``) from the caller. The key names are in docs/contracts.md#redis-keys.
"""

from __future__ import annotations

import json
from collections.abc import Collection, Mapping
from dataclasses import dataclass
from typing import Any

from policies.capabilities import ModelCapabilities, capability_problems
from policies.errors import PolicyError, PolicyInvalidError
from policies.kinds import kind_policy, served_kinds
from policies.schema import Policy
from policies.store import check_content_hash, dump_policy

DEFAULT_PREFIX = "cascade"
PREFIX_ENV = "CASCADE_REDIS_PREFIX"


class PolicyChangedError(PolicyError):
    """A conditional push found another policy than the one it was told to replace."""


@dataclass(frozen=True, slots=True)
class PolicyKeys:
    """The served policy's key and channel names under ``prefix``."""

    prefix: str = DEFAULT_PREFIX

    @property
    def policy_current(self) -> str:
        """String: the current policy JSON."""
        return f"{self.prefix}:policy:current"

    @property
    def policy_version(self) -> str:
        """Integer, INCR-ed by every push."""
        return f"{self.prefix}:policy:version"

    @property
    def policy_updates(self) -> str:
        """Pub/sub channel; each message is the new version."""
        return f"{self.prefix}:policy:updates"

    @property
    def recalibration_last(self) -> str:
        """String: the JSON report of the last ``cascade recalibrate`` that read or pushed here."""
        return f"{self.prefix}:recalibration:last"


def check_servable(
    policy: Policy,
    known_models: Collection[str] | None,
    capabilities: Mapping[str, ModelCapabilities] | None = None,
) -> None:
    """Raise PolicyInvalidError if a gateway cannot serve ``policy``.

    ``known_models`` are the model names of the gateway config; every model a tier or envelope point
    routes to (in the top level or a kind section) must be one of them (None skips that check).
    The ``policy_id`` must be the content hash (a policy edited after it was stamped is refused:
    its id would name other content). ``capabilities`` (the config's ``models.*.capabilities``;
    None skips the check): each served kind's scorer must get from every scored model what it
    reads (``policies.capabilities``).
    """
    check_content_hash(policy, f"policy {policy.policy_id}")
    views = [kind_policy(policy, kind) for kind in served_kinds(policy)]  # the top level, each section
    if any(view.scorer.name == "external" for view in views):
        raise PolicyInvalidError(
            f"policy {policy.policy_id}: scorer 'external' is a precomputed score the gateway cannot "
            "compute from live logprobs; calibrate with a logprob scorer to serve it"
        )
    if known_models is None:
        return
    routed = {m for v in views for tier in v.tiers.values() for route in tier.routes for m in route.models}
    routed |= {m for v in views for point in v.envelope for m in point.models}
    # A scorer with a model of its own (the verifier) calls a configured model too.
    routed |= {own for v in views if (own := v.scorer.own_model) is not None}
    missing = sorted(routed - set(known_models))
    if missing:
        raise PolicyInvalidError(
            f"policy {policy.policy_id} routes to model(s) {', '.join(missing)} that the gateway config "
            f"does not define (configured: {', '.join(sorted(known_models))})"
        )
    check_capabilities(policy, capabilities)


def check_capabilities(policy: Policy, capabilities: Mapping[str, ModelCapabilities] | None) -> None:
    """PolicyInvalidError (one line: the first problem, and how many more) if ``policy``'s scorer
    needs more than a scored model gives (``policies.capabilities.capability_problems``)."""
    problems = [] if capabilities is None else capability_problems(policy, capabilities)
    if problems:
        more = f" (+{len(problems) - 1} more)" if len(problems) > 1 else ""
        raise PolicyInvalidError(f"policy {policy.policy_id} cannot be scored: {problems[0]}{more}")


# Sentinel of an unconditional push (None is meaningful: "only if no policy is stored").
_ANY = object()


def read_current(client: Any, keys: PolicyKeys) -> str | None:
    """The stored policy JSON text, or None when no policy was pushed."""
    raw = client.get(keys.policy_current)
    return None if raw is None else str(raw)


def push_policy(
    client: Any,
    policy: Policy,
    keys: PolicyKeys,
    *,
    replacing: object = _ANY,
    known_models: Collection[str] | None = None,
    capabilities: Mapping[str, ModelCapabilities] | None = None,
) -> int:
    """Check ``policy`` is servable, store it as current, bump the version, notify replicas.

    Returns the new version. ``known_models``: the gateway config's model names; a policy routing
    to another model is refused before anything is stored (None: not checked, see
    ``check_servable``); so is one whose scorer needs more than a model's ``capabilities`` give.
    SET and INCR run in one MULTI/EXEC transaction so a reader never pairs a new version with an
    old policy; the PUBLISH follows. With ``replacing`` (the stored JSON text
    read earlier, or None for "no policy stored") the push is conditional: the keys are WATCHed,
    PolicyChangedError is raised if the stored policy is another one, and the client's
    ``WatchError`` propagates if it changes between that check and the transaction.
    """
    check_servable(policy, known_models, capabilities)  # includes the content-hash check of policy_id
    text = dump_policy(policy)
    with client.pipeline(transaction=True) as pipe:
        if replacing is _ANY:
            stored_version = client.get(keys.policy_version)
        else:
            pipe.watch(keys.policy_current, keys.policy_version)  # immediate mode until multi()
            stored = pipe.get(keys.policy_current)
            if stored != replacing:
                now = "no policy" if stored is None else _policy_id_of(stored)
                raise PolicyChangedError(f"the policy at {keys.policy_current} changed meanwhile (now {now})")
            stored_version = pipe.get(keys.policy_version)
            pipe.multi()
        # INCR on a value that is not an integer fails *inside* MULTI/EXEC after SET already applied,
        # so check first: a corrupt version (hand edit, stray SET) restarts at 1. Replicas compare the
        # stored content too, so they still switch.
        corrupt = stored_version is not None and not _is_integer(stored_version)
        pipe.set(keys.policy_current, text)
        if corrupt:
            pipe.set(keys.policy_version, 1)
        else:
            pipe.incr(keys.policy_version)
        results = pipe.execute()
    version = 1 if corrupt else int(results[1])
    client.publish(keys.policy_updates, str(version))
    return version


def _is_integer(value: Any) -> bool:
    try:
        int(value)
    except (TypeError, ValueError):
        return False
    return True


def _policy_id_of(raw: str) -> str:
    try:
        document = json.loads(raw)
    except ValueError:
        return "an unreadable value"
    policy_id = document.get("policy_id") if isinstance(document, dict) else None
    return f"policy {policy_id}" if isinstance(policy_id, str) else "an unreadable value"
