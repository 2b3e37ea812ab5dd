"""Reading and writing policy files: validation, content hash, atomic writes."""

from __future__ import annotations

import hashlib
import json
import os
import tempfile
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from pydantic import ValidationError

from policies.errors import PolicyInvalidError
from policies.schema import Policy

# Fields that do not change what a policy does, so they are left out of its content hash:
# recalibrating the same data twice gives the same policy_id.
_HASH_EXCLUDED = ("policy_id", "created_at")
# Optional fields added to schema version 1 after it was published: when absent (null) they are left
# out of the file and of the hash, so a policy written before them keeps its bytes and policy_id.
_OPTIONAL_FIELDS = ("score_distribution", "kinds", "router", "shift_reference")
# The same inside a kind section, and inside every tier's ``expected`` (top level and sections).
_OPTIONAL_SECTION_FIELDS = ("scorer", "score_distribution", "router")
_OPTIONAL_TIER_FIELDS = ("routing", "commit", "mechanism", "scorer")
_OPTIONAL_EXPECTED_FIELDS = ("heldout", "bounds")
# Scorer fields added later with a default: left out of the file and of the hash at their default.
_DEFAULT_SCORER_FIELDS = {"tokens": "all"}


def without_absent_fields(document: dict[str, Any]) -> dict[str, Any]:
    """A copy of a policy document without the optional fields it does not have (null or missing)."""
    out = {k: v for k, v in document.items() if not (k in _OPTIONAL_FIELDS and v is None)}
    if isinstance(out.get("kinds"), dict):
        out["kinds"] = {
            kind: _without_default_scorer_fields(
                _drop_nulls(_without_absent_expectations(section), _OPTIONAL_SECTION_FIELDS)
            )
            for kind, section in out["kinds"].items()
        }
    return _without_absent_expectations(_without_default_scorer_fields(out))


def _without_default_scorer_fields(document: Any) -> Any:
    """``document`` with its ``scorer`` stripped of the later fields at their default values."""
    if not isinstance(document, dict) or not isinstance(document.get("scorer"), dict):
        return document
    scorer = {
        k: v
        for k, v in document["scorer"].items()
        if k not in _DEFAULT_SCORER_FIELDS or v != _DEFAULT_SCORER_FIELDS[k]
    }
    return {**document, "scorer": scorer}


def _without_absent_expectations(document: Any) -> Any:
    """``document`` with ``tiers.*`` and their ``expected`` stripped of their absent optional fields
    (and a tier's own scorer of its later fields at their default)."""
    if not isinstance(document, dict) or not isinstance(document.get("tiers"), dict):
        return document
    tiers = {}
    for name, tier in document["tiers"].items():
        if isinstance(tier, dict) and isinstance(tier.get("expected"), dict):
            tier = {**tier, "expected": _drop_nulls(tier["expected"], _OPTIONAL_EXPECTED_FIELDS)}
        tiers[name] = _without_default_scorer_fields(_drop_nulls(tier, _OPTIONAL_TIER_FIELDS))
    return {**document, "tiers": tiers}


def _drop_nulls(document: Any, names: tuple[str, ...]) -> Any:
    if not isinstance(document, dict):
        return document
    return {k: v for k, v in document.items() if not (k in names and v is None)}


def compute_policy_id(document: dict[str, Any]) -> str:
    """Content hash (first 16 hex digits of SHA-256) of a policy document's canonical JSON."""
    content = {k: v for k, v in without_absent_fields(document).items() if k not in _HASH_EXCLUDED}
    canonical = json.dumps(content, sort_keys=True, separators=(",", ":"), allow_nan=False)
    return hashlib.sha256(canonical.encode()).hexdigest()[:16]


def check_content_hash(policy: Policy, source: str = "<policy>") -> None:
    """Raise PolicyInvalidError unless ``policy.policy_id`` is the content hash of ``policy``.

    The id names what a policy does in metrics, headers and rollouts, so a policy edited after it
    was stamped (same id, different thresholds) is refused instead of being served under a name
    that describes other content. The message gives the hash to put in ``policy_id`` after a
    deliberate hand edit.
    """
    actual = compute_policy_id(policy.model_dump(mode="json"))
    if actual != policy.policy_id:
        raise PolicyInvalidError(
            f"{source}: policy_id {policy.policy_id!r} does not match the policy's content (hash "
            f"{actual!r}); the policy was changed after it was written: if the change is intended, "
            f'set "policy_id": "{actual}"'
        )


def build_policy(document: dict[str, Any]) -> Policy:
    """Validate a policy document lacking ``policy_id``/``created_at`` and stamp both."""
    stamped = dict(document)
    stamped.setdefault("created_at", datetime.now(UTC).isoformat(timespec="seconds"))
    stamped["policy_id"] = "pending"
    policy = _validate(stamped, source="<new policy>")
    return policy.model_copy(update={"policy_id": compute_policy_id(policy_as_document(policy))})


def parse_policy(raw: bytes | str, source: str = "<policy>") -> Policy:
    """Parse and validate policy JSON; raise PolicyInvalidError with a one-line reason."""
    try:
        document = json.loads(raw)
    except (ValueError, UnicodeDecodeError) as exc:
        raise PolicyInvalidError(f"{source}: not valid JSON ({exc})") from exc
    except RecursionError:
        raise PolicyInvalidError(f"{source}: not a policy (JSON nested too deeply to read)") from None
    if not isinstance(document, dict):
        raise PolicyInvalidError(f"{source}: a policy must be a JSON object")
    return _validate(document, source)


def load_policy(path: str | Path) -> Policy:
    """Load and validate a policy file."""
    path = Path(path)
    try:
        raw = path.read_bytes()
    except OSError as exc:
        raise PolicyInvalidError(f"{path}: cannot read ({exc.strerror})") from exc
    return parse_policy(raw, source=str(path))


def dump_policy(policy: Policy) -> str:
    """Policy as pretty, stable JSON text."""
    return json.dumps(policy_as_document(policy), indent=2, allow_nan=False) + "\n"


def policy_as_document(policy: Policy) -> dict[str, Any]:
    """The policy as a JSON-ready document, without the optional fields it does not have."""
    return without_absent_fields(policy.model_dump(mode="json"))


def save_policy(policy: Policy, path: str | Path) -> None:
    """Write a policy atomically: a watcher or reader never sees a half-written file."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp_name = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        # mkstemp creates 0600; a policy is configuration read by other users (e.g. the gateway
        # container's non-root user), so give it ordinary file permissions.
        os.fchmod(fd, 0o644)
        with os.fdopen(fd, "w") as handle:
            handle.write(dump_policy(policy))
            handle.flush()
            os.fsync(handle.fileno())
        os.replace(tmp_name, path)
    except BaseException:
        Path(tmp_name).unlink(missing_ok=True)
        raise


def policy_json_schema() -> dict[str, Any]:
    """The JSON Schema of the policy file, as exported to policies/policy.schema.json."""
    schema = Policy.model_json_schema()
    schema["$schema"] = "https://json-schema.org/draft/2020-12/schema"
    schema["$id"] = "https://cascade-gateway/policy.schema.json"
    return schema


def _validate(document: dict[str, Any], source: str) -> Policy:
    try:
        return Policy.model_validate(document)
    except ValidationError as exc:
        first = exc.errors()[0]
        where = ".".join(str(p) for p in first["loc"]) or "<root>"
        more = f" (+{exc.error_count() - 1} more)" if exc.error_count() > 1 else ""
        raise PolicyInvalidError(f"{source}: {where}: {first['msg']}{more}") from exc
