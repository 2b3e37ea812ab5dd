"""Traffic store fixtures (a pytest plugin registered in tests/conftest.py): one store per backend,
the real PostgreSQL and a JSONL file, cleaned up afterwards.

* ``postgres_url``: a store URL in a private schema ``traffic_test_<random>`` of the database ``test``
  on 127.0.0.1:5432 (tests/support/postgres.py), dropped after the test;
* ``file_url``: a JSONL file store in the test's temporary directory;
* ``store_url``: each of the two in turn (parametrized).
"""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.support.postgres import POSTGRES_URL, drop_schema


@pytest.fixture
def postgres_url() -> Iterator[str]:
    """A store URL on the real PostgreSQL with a private schema, dropped after the test."""
    schema = f"traffic_test_{uuid.uuid4().hex[:12]}"
    yield f"{POSTGRES_URL}?schema={schema}"
    drop_schema(schema)


@pytest.fixture
def file_url(tmp_path: Path) -> str:
    """A JSONL file store URL in the test's temporary directory."""
    return f"file://{tmp_path / 'traffic.jsonl'}"


@pytest.fixture(params=["postgres", "file"])
def store_url(request: pytest.FixtureRequest) -> str:
    """Each backend in turn."""
    return str(request.getfixturevalue(f"{request.param}_url"))
