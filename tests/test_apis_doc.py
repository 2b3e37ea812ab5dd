"""docs/apis.md and docs/contracts.md name what the edges serve: every API path is on the HTTP
surface, and every Responses field the edge knows (mapped, accepted as a hint, refused) is in its
section of apis.md. A field added to the code without the doc fails here."""

from __future__ import annotations

import re
from pathlib import Path

from gateway.api.app import api_edges
from gateway.api.edges import responses_request
from money.charges import CHAT_PARTS


def test_every_api_path_is_on_the_http_surface(repo_root: Path) -> None:
    contracts = (repo_root / "docs" / "contracts.md").read_text()
    surface = contracts.split("## HTTP surface", 1)[1].split("\n## ", 1)[0]
    for edge in api_edges():
        assert f"| `POST {edge.path}` |" in surface, edge.path


def test_every_responses_field_the_edge_knows_is_documented(repo_root: Path) -> None:
    text = (repo_root / "docs" / "apis.md").read_text()
    section = text.split("## Responses", 1)[1].split("\n## ", 1)[0]
    named = set(re.findall(r"`([a-z_]+)", section))
    known = responses_request._MAPPED | responses_request._IGNORED_HINTS | set(responses_request._STATEFUL)
    assert known - named == set()
    includables = {responses_request._INCLUDABLE_LOGPROBS, "reasoning.encrypted_content"}
    assert all(f"`{value}`" in section for value in includables)


def test_every_content_part_type_forwarded_is_documented(repo_root: Path) -> None:
    """The allowlist of content parts (money.charges.CHAT_PARTS) is the one the docs list."""
    for doc, heading in (("apis.md", "## Content parts"), ("contracts.md", "### Content parts")):
        text = (repo_root / "docs" / doc).read_text()
        section = text.split(heading, 1)[1].split("\n## ", 1)[0]
        assert all(f"`{part_type}`" in section for part_type in CHAT_PARTS), doc
        assert "`unsupported_input`" in section, doc
