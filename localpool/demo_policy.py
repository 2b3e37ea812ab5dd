"""The policy ``cascade demo`` serves: the arithmetic policy for text, the tool-call policy as its section.

Two policies were calibrated on the pool, each on its own runs: ``policies/local-demo.json`` on 500
generated arithmetic questions (text), ``policies/local-tools.json`` on 200 BFCL questions (requests
with ``tools``, docs/bfcl.md). A policy serves each request kind from its section for that kind, else
from its top level (``policies.kinds``), so the demo serves one policy made of both: the arithmetic
policy's top level and the tool-call policy's top level as its ``kinds.tool_call`` section (same tier
names, same default tier). Nothing is recalibrated: each route keeps its thresholds and its promise.

``python -m localpool.demo_policy`` rewrites ``policies/local-demo-served.json`` from the two files
(``tests/localpool/test_demo_policy.py`` checks the committed one is what they make).
"""

from __future__ import annotations

import sys
from pathlib import Path

from policies import Policy, build_policy, load_policy, save_policy
from policies.schema import KindSection
from policies.store import policy_as_document

TEXT_POLICY = Path("policies/local-demo.json")
TOOLS_POLICY = Path("policies/local-tools.json")
SERVED_POLICY = Path("policies/local-demo-served.json")


def compose(text: Policy, tools: Policy) -> Policy:
    """``text`` with ``tools``' top level as its ``kinds.tool_call`` section (``policy_id`` recomputed,
    ``created_at`` the text policy's, so composing the same files gives the same bytes)."""
    if text.kinds:
        raise ValueError(f"the text policy {text.policy_id} has kind sections already: {sorted(text.kinds)}")
    section = KindSection(
        models=tools.models,
        default_tier=tools.default_tier,
        tiers=tools.tiers,
        envelope=tools.envelope,
        scorer=tools.scorer,
        score_distribution=tools.score_distribution,
    )
    document = policy_as_document(text.model_copy(update={"kinds": {"tool_call": section}}))
    document.pop("policy_id", None)
    return build_policy(document)


def main(root: Path = Path()) -> None:
    """Write the served policy from the two committed ones (paths relative to ``root``)."""
    served = compose(load_policy(root / TEXT_POLICY), load_policy(root / TOOLS_POLICY))
    save_policy(served, root / SERVED_POLICY)
    print(f"{root / SERVED_POLICY}: policy {served.policy_id}")


if __name__ == "__main__":
    main(Path(sys.argv[1]) if len(sys.argv) > 1 else Path())
