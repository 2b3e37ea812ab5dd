"""Which traffic store backend a URL names, opened lazily.

Above ``traffic.store`` (the protocol and errors every backend imports) and the two backends; the
backend's own dependencies (asyncpg for PostgreSQL) are imported only when its URL is opened.
"""

from __future__ import annotations

from traffic.store import StoreError, TrafficStore


def open_store(url: str) -> TrafficStore:
    """The backend for ``url``: ``postgresql://`` / ``postgres://`` or ``file://``. Connects lazily."""
    scheme = url.split(":", 1)[0].lower() if ":" in url else ""
    if scheme in {"postgresql", "postgres"}:
        from traffic.postgres_store import PostgresStore

        return PostgresStore(url)
    if scheme == "file":
        from traffic.file_store import FileStore

        return FileStore.from_url(url)
    raise StoreError(f"unknown traffic store URL {url!r}: use postgresql://... or file:///path/traffic.jsonl")
