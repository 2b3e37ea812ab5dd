from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

import jsonschema
import pytest

from policies import (
    PolicyInvalidError,
    build_policy,
    check_content_hash,
    load_policy,
    parse_policy,
    policy_json_schema,
    save_policy,
)

SCHEMA_FILE = Path(__file__).resolve().parents[2] / "policies" / "policy.schema.json"


def test_exported_json_schema_matches_the_pydantic_model() -> None:
    exported = json.loads(SCHEMA_FILE.read_text())
    assert exported == json.loads(json.dumps(policy_json_schema(), sort_keys=True)), (
        "policies/policy.schema.json is stale: regenerate it with python -m policies.export_schema"
    )


def test_saved_policy_round_trips_and_validates_against_the_json_schema(
    policy_document: dict[str, Any], tmp_path: Path
) -> None:
    policy = build_policy(policy_document)
    path = tmp_path / "policy.json"
    save_policy(policy, path)
    document = json.loads(path.read_text())
    jsonschema.validate(document, json.loads(SCHEMA_FILE.read_text()))
    assert load_policy(path) == policy


def test_policy_id_is_a_content_hash_independent_of_creation_time(
    policy_document: dict[str, Any],
) -> None:
    first = build_policy({**policy_document, "created_at": "2026-01-01T00:00:00+00:00"})
    second = build_policy({**policy_document, "created_at": "2026-06-01T00:00:00+00:00"})
    changed = build_policy({**policy_document, "default_tier": "economy"})
    assert first.policy_id == second.policy_id
    assert first.policy_id != changed.policy_id
    assert len(first.policy_id) == 16


@pytest.mark.parametrize(
    ("mutate", "message"),
    [
        (lambda d: d.update(default_tier="premium"), "default_tier"),
        (lambda d: d["tiers"]["balanced"]["routes"][0].update(thresholds=[]), "threshold"),
        (lambda d: d["tiers"]["economy"]["routes"][0].update(weight=0.5), "sum to 1"),
        (lambda d: d["tiers"]["balanced"]["routes"][0].update(models=["small", "huge"]), "huge"),
        (lambda d: d["tiers"]["balanced"].update(objective={}), "exactly one"),
        (lambda d: d.update(surprise=1), "surprise"),
        (lambda d: d["envelope"].reverse(), "sorted"),
        (lambda d: d["tiers"]["balanced"]["routes"][0].update(thresholds=[math.nan]), "finite"),
        (lambda d: d["tiers"]["balanced"]["routes"][0].update(thresholds=[math.inf]), "finite"),
        (lambda d: d["envelope"][1].update(thresholds=[math.nan]), "finite"),
        (lambda d: d["envelope"][0].update(cost_usd=math.nan), "finite"),
        (lambda d: d["models"]["small"].update(mean_cost_usd=math.inf), "finite"),
        (lambda d: d["tiers"]["balanced"]["expected"].update(cost_usd=math.nan), "finite"),
        (lambda d: d["tiers"]["balanced"].update(shadow_price=math.inf), "finite"),
        (lambda d: d["tiers"]["balanced"]["routes"][0].update(models=["small", "small"]), "repeat"),
        (lambda d: d["envelope"][-1].update(models=["small", "small"], thresholds=[0.5]), "repeat"),
    ],
)
def test_invalid_policies_are_rejected_with_a_one_line_reason(
    policy_document: dict[str, Any], mutate: Any, message: str
) -> None:
    document = {**policy_document, "policy_id": "x", "created_at": "2026-01-01T00:00:00Z"}
    document = json.loads(json.dumps(document))
    mutate(document)
    with pytest.raises(PolicyInvalidError) as caught:
        parse_policy(json.dumps(document), source="p.json")
    assert message in str(caught.value)
    assert str(caught.value).startswith("p.json: ")
    assert "\n" not in str(caught.value)


def test_save_is_atomic_and_leaves_no_temporary_files(
    policy_document: dict[str, Any], tmp_path: Path
) -> None:
    policy = build_policy(policy_document)
    save_policy(policy, tmp_path / "p.json")
    save_policy(policy, tmp_path / "p.json")
    assert [p.name for p in tmp_path.iterdir()] == ["p.json"]


def test_corrupt_file_is_a_policy_error_not_a_traceback(tmp_path: Path) -> None:
    path = tmp_path / "p.json"
    path.write_text('{"schema_version": 1,')
    with pytest.raises(PolicyInvalidError, match="not valid JSON"):
        load_policy(path)


def test_saved_policy_is_readable_by_other_users(policy_document: dict[str, Any], tmp_path: Path) -> None:
    save_policy(build_policy(policy_document), tmp_path / "p.json")
    assert (tmp_path / "p.json").stat().st_mode & 0o777 == 0o644


def test_a_hundred_thousand_deep_document_is_a_policy_error_not_a_recursion_error() -> None:
    with pytest.raises(PolicyInvalidError, match="nested too deeply"):
        parse_policy("[" * 100_000 + "]" * 100_000, source="deep.json")


def test_content_hash_check_refuses_a_policy_changed_after_it_was_stamped(
    policy_document: dict[str, Any],
) -> None:
    policy = build_policy(policy_document)
    check_content_hash(policy)  # freshly stamped: fine
    edited = json.loads(json.dumps(policy.model_dump(mode="json")))
    edited["tiers"]["balanced"]["routes"][0]["thresholds"] = [0.123]
    tampered = parse_policy(json.dumps(edited), source="p.json")  # the schema alone accepts it
    with pytest.raises(PolicyInvalidError) as caught:
        check_content_hash(tampered, "p.json")
    message = str(caught.value)
    assert policy.policy_id in message and "\n" not in message
    expected = build_policy({k: v for k, v in edited.items() if k not in ("policy_id", "created_at")})
    assert f'"policy_id": "{expected.policy_id}"' in message  # says how to re-stamp a deliberate edit
