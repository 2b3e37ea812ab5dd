"""Regenerate policies/policy.schema.json from the pydantic model: python -m policies.export_schema."""

from __future__ import annotations

import json
from pathlib import Path

from policies.store import policy_json_schema

SCHEMA_PATH = Path(__file__).with_name("policy.schema.json")


def main() -> None:
    """Write the JSON Schema beside this module."""
    SCHEMA_PATH.write_text(json.dumps(policy_json_schema(), indent=2, sort_keys=True) + "\n")


if __name__ == "__main__":
    main()
