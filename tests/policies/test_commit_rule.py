"""A tier's ``commit`` rule in the policy file: additive (an absent rule is no part of the file or
its id), well-formed, and consistent with the tier's ``routing`` and the policy's scorer."""

from __future__ import annotations

import orjson
import pytest

from policies import Policy, build_policy
from policies.errors import PolicyInvalidError
from tests.support.policy_files import policy_document


def test_commit_rule_is_additive_and_consistent_with_routing() -> None:
    plain = build_policy(policy_document())
    prefixed = build_policy(policy_document({"balanced": {"commit": {"rule": "prefix", "tokens": 16}}}))
    assert "commit" not in orjson.loads(plain.model_dump_json())["tiers"]["balanced"]
    assert plain.policy_id != prefixed.policy_id
    assert prefixed.tiers["balanced"].commit is not None
    assert Policy.model_validate_json(prefixed.model_dump_json()) == prefixed
    with pytest.raises(PolicyInvalidError, match="a prefix commit rule has tokens"):
        build_policy(policy_document({"balanced": {"commit": {"rule": "prefix"}}}))
    with pytest.raises(PolicyInvalidError, match="greater than or equal to 1"):
        build_policy(policy_document({"balanced": {"commit": {"rule": "prefix", "tokens": 0}}}))
    with pytest.raises(PolicyInvalidError, match="reads none"):
        build_policy(
            policy_document(
                {"balanced": {"commit": {"rule": "prefix", "tokens": 4}}},
                scorer={"name": "self_report"},
            )
        )
    routing = {"mechanism": "hybrid", "models": ["large"]}
    with pytest.raises(PolicyInvalidError, match="streams natively"):
        build_policy(
            policy_document({"balanced": {"commit": {"rule": "prefix", "tokens": 4}, "routing": routing}})
        )
    buffered = build_policy(policy_document({"balanced": {"commit": {"rule": "buffer"}}}))
    assert buffered.tiers["balanced"].commit is not None
    assert buffered.tiers["balanced"].commit.document() == {"rule": "buffer"}
