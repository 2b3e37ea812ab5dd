"""The embedded store: one JSONL file, one row per line, for a single gateway process.

``file:///var/lib/cascade/traffic.jsonl``. Writes append a whole batch under an exclusive
``flock`` on ``<file>.lock`` (so two processes on one host never interleave lines), in a worker
thread (the event loop never waits on the disk). ``purge`` rewrites the file to a temporary one and
renames it over, under the same lock. A torn last line (a crash mid-write) is skipped on read.

A write skips the (query_id, model) pairs the file already holds. The store keeps an index of those
pairs and the file position it covers: the first write reads the keys of the whole file, each later
one only the lines appended since (by any process), so a write costs the batch, not the file (a
gateway writing every few seconds must not re-read a growing file each time). A file replaced
(purged) or shortened is indexed again from its start.

The path must be a regular file (or not exist yet): a device, FIFO or directory is refused when the
store is made and whenever it is opened, since reading ``/dev/zero`` or a pipe never ends. Reads
never go past the size the file had when it was opened, in chunks of ``_CHUNK_BYTES``; indexing
keeps at most ``_KEY_LINE_BYTES`` of a line (the key is at its start), so indexing a file costs
memory for its keys, not for its size.
"""

from __future__ import annotations

import asyncio
import contextlib
import fcntl
import json
import os
import re
import stat
import threading
from collections.abc import Iterable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from datetime import datetime
from pathlib import Path
from typing import Any
from urllib.parse import unquote, urlparse

from traffic.rows import TrafficRow
from traffic.store import StoreError, StoreUnavailableError, check_where

# The start of a line this store writes (``to_record`` puts query_id, then model, first): the key
# without parsing the whole row, which may carry kilobytes of logprobs.
_KEY_PREFIX = re.compile(rb'^\{"query_id":("(?:[^"\\]|\\.)*"),"model":("(?:[^"\\]|\\.)*")')
# Reads go by chunks of this size; indexing keeps at most this much of one line (its key is first).
_CHUNK_BYTES = 1 << 20
_KEY_LINE_BYTES = 1 << 20
_KINDS = {
    stat.S_IFCHR: "a character device",
    stat.S_IFBLK: "a block device",
    stat.S_IFIFO: "a FIFO",
    stat.S_IFSOCK: "a socket",
    stat.S_IFDIR: "a directory",
}


class FileStore:
    """A ``TrafficStore`` over one JSONL file."""

    def __init__(self, path: Path):
        """A store over ``path``; StoreError if it exists and is not a regular file."""
        self.path = Path(path)
        # Not there yet (the first write creates it) or unreachable now: then the writes will say.
        with contextlib.suppress(OSError):
            _check_regular(os.stat(self.path).st_mode, self.path)
        self._lock_path = self.path.with_name(self.path.name + ".lock")
        self._thread_lock = threading.Lock()
        self._keys: set[tuple[str, str]] = set()  # (query_id, model) pairs the file holds
        self._indexed: tuple[int, int] | None = None  # (inode, byte offset) the index covers

    @classmethod
    def from_url(cls, url: str) -> FileStore:
        """``file:///abs/path.jsonl`` (or ``file:relative/path.jsonl``) -> a store."""
        parsed = urlparse(url)
        path = (
            unquote(parsed.netloc + parsed.path)
            if parsed.netloc not in {"", "localhost"}
            else unquote(parsed.path)
        )
        if not path:
            raise StoreError(f"traffic store URL {url!r} has no path")
        return cls(Path(path))

    def __repr__(self) -> str:
        return f"FileStore({str(self.path)!r})"

    # --- TrafficStore -----------------------------------------------------------------------------

    async def write_rows(self, batch: Sequence[TrafficRow]) -> int:
        """Append the batch (one write call); rows whose (query_id, model) is already stored are kept out."""
        if not batch:
            return 0
        return await asyncio.to_thread(self._append, list(batch))

    async def export(
        self, since: datetime | None = None, where: Mapping[str, str] | None = None
    ) -> list[TrafficRow]:
        """Rows at or after ``since`` matching ``where`` (as text), in file order."""
        where = check_where(where)
        rows = await asyncio.to_thread(self._read_all)
        return [r for r in rows if (since is None or r.timestamp >= since) and _matches(r, where)]

    async def purge(self, older_than: datetime) -> int:
        """Drop rows recorded before ``older_than``; returns how many."""
        return await asyncio.to_thread(self._purge, older_than)

    async def close(self) -> None:
        """Nothing stays open between calls."""

    # --- blocking parts, run in a worker thread -----------------------------------------------------

    @contextmanager
    def _locked(self) -> Iterator[None]:
        try:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            with self._thread_lock, open(self._lock_path, "a") as lock:
                fcntl.flock(lock, fcntl.LOCK_EX)
                try:
                    yield
                finally:
                    fcntl.flock(lock, fcntl.LOCK_UN)
        except OSError as exc:
            raise StoreUnavailableError(f"traffic store {self.path}: {exc.strerror or exc}") from exc

    def _append(self, batch: list[TrafficRow]) -> int:
        with self._locked():
            seen = self._index_unlocked()
            fresh = []
            for row in batch:
                key = (row.query_id, row.model)
                if key not in seen:
                    seen.add(key)
                    fresh.append(row)
            data = b"".join(r.to_json_line() for r in fresh)
            with _open_regular(self.path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, "ab") as handle:
                if handle.tell() and not self._ends_with_newline():
                    handle.write(b"\n")  # close a torn last line so the batch starts on its own line
                handle.write(data)
                handle.flush()
                os.fsync(handle.fileno())
                stat = os.fstat(handle.fileno())
            self._indexed = (stat.st_ino, stat.st_size)  # our own lines are in the index already
            return len(fresh)

    def _index_unlocked(self) -> set[tuple[str, str]]:
        """The keys the file holds, reading only what was appended since the last call."""
        try:
            handle = _open_regular(self.path, os.O_RDONLY, "rb")
        except FileNotFoundError:
            self._keys, self._indexed = set(), None
            return self._keys
        with handle:
            info = os.fstat(handle.fileno())
            start = 0
            if (
                self._indexed is not None
                and self._indexed[0] == info.st_ino
                and info.st_size >= self._indexed[1]
            ):
                start = self._indexed[1]
            else:
                self._keys = set()
            handle.seek(start)
            end = start
            for line in _lines(handle, info.st_size - start, keep=_KEY_LINE_BYTES):
                if not line.endswith(b"\n"):
                    break  # a torn last line is read again next time
                end += _line_length(line)
                key = _line_key(line)
                if key is not None:
                    self._keys.add(key)
        self._indexed = (info.st_ino, end)
        return self._keys

    def _ends_with_newline(self) -> bool:
        with _open_regular(self.path, os.O_RDONLY, "rb") as handle:
            handle.seek(-1, os.SEEK_END)
            return handle.read(1) == b"\n"

    def _read_all(self) -> list[TrafficRow]:
        with self._locked():
            return self._read_unlocked()

    def _read_unlocked(self) -> list[TrafficRow]:
        try:
            handle = _open_regular(self.path, os.O_RDONLY, "rb")
        except FileNotFoundError:
            return []
        rows = []
        with handle:
            size = os.fstat(handle.fileno()).st_size
            for number, line in enumerate(_lines(handle, size), start=1):
                if not line.strip():
                    continue
                try:
                    rows.append(TrafficRow.from_record(json.loads(line)))
                except ValueError as exc:
                    if not line.endswith(b"\n"):
                        continue  # torn last line of an interrupted write
                    raise StoreError(
                        f"traffic store {self.path}: line {number}: not a traffic row ({exc})"
                    ) from None
        return rows

    def _purge(self, older_than: datetime) -> int:
        with self._locked():
            rows = self._read_unlocked()
            kept = [r for r in rows if r.timestamp >= older_than]
            if len(kept) == len(rows):
                return 0
            temporary = self.path.with_name(self.path.name + ".purge")
            with open(temporary, "wb") as handle:
                for row in kept:
                    handle.write(row.to_json_line())
                handle.flush()
                os.fsync(handle.fileno())
            os.replace(temporary, self.path)
            self._keys, self._indexed = set(), None  # another file now: index it again
            return len(rows) - len(kept)


def _check_regular(mode: int, path: Path) -> None:
    if not stat.S_ISREG(mode):
        kind = _KINDS.get(stat.S_IFMT(mode), "not a regular file")
        raise StoreError(f"traffic store {path} is {kind}, not a regular file: give the path of a JSONL file")


def _open_regular(path: Path, flags: int, mode: str) -> Any:
    """``path`` opened (binary) if it is a regular file; StoreError otherwise, never blocking on a FIFO."""
    descriptor = os.open(path, flags | os.O_NONBLOCK | os.O_CLOEXEC, 0o644)
    try:
        _check_regular(os.fstat(descriptor).st_mode, path)
    except StoreError:
        os.close(descriptor)
        raise
    return os.fdopen(descriptor, mode)


def _lines(handle: Any, size: int, keep: int | None = None) -> Iterable[bytes]:
    """The lines of the next ``size`` bytes of ``handle`` (with their newline; the last may lack one).

    Reads ``_CHUNK_BYTES`` at a time and never more than ``size`` in all. With ``keep``, a line
    longer than that is cut to its first ``keep`` bytes plus its newline, and its length is then
    ``_line_length`` of what is yielded.
    """
    pending = b""
    skipped = 0  # bytes dropped from the middle of the pending line
    while size > 0:
        chunk = handle.read(min(_CHUNK_BYTES, size))
        if not chunk:
            break
        size -= len(chunk)
        pending += chunk
        start = 0
        while (newline := pending.find(b"\n", start)) >= 0:
            line = pending[start : newline + 1]
            yield line if not skipped else _LongLine(line, skipped)
            skipped = 0
            start = newline + 1
        pending = pending[start:]
        if keep is not None and len(pending) > keep:
            skipped += len(pending) - keep
            pending = pending[:keep]
    if pending:
        yield pending if not skipped else _LongLine(pending, skipped)


class _LongLine(bytes):
    """The kept start (and newline) of a line longer than ``keep``, knowing how much was dropped."""

    dropped: int

    def __new__(cls, kept: bytes, dropped: int) -> _LongLine:
        line = super().__new__(cls, kept)
        line.dropped = dropped
        return line


def _line_length(line: bytes) -> int:
    """The length in the file of a line ``_lines`` yielded (a long one was cut)."""
    return len(line) + getattr(line, "dropped", 0)


def _line_key(line: bytes) -> tuple[str, str] | None:
    """The (query_id, model) of one stored line, or None for a line that is not a row."""
    match = _KEY_PREFIX.match(line)
    try:
        if match is not None:
            return json.loads(match.group(1)), json.loads(match.group(2))
        if not line.strip():
            return None
        record = json.loads(line)  # written by another tool, in another key order
        return str(record["query_id"]), str(record["model"])
    except (ValueError, KeyError, TypeError):
        return None


def _matches(row: TrafficRow, where: Mapping[str, str]) -> bool:
    record = row.to_record()
    return all(
        record.get(column) is not None and _text(record[column]) == value for column, value in where.items()
    )


def _text(value: object) -> str:
    return str(value)
