"""Run the README's shell blocks as a reader pastes them, in a scratch directory, never in the repository.

A block calls ``cascade`` or ``.venv/bin/cascade`` (the reader's virtualenv); in the scratch directory
both are a small script that runs this checkout's ``cascade`` with the test's interpreter.
"""

from __future__ import annotations

import contextlib
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

# How long what a block started may take to stop (the demo stops its gateway and its model servers).
STOP_GRACE_S = 120.0


def readme_section(readme: str, heading: str) -> str:
    """The text under ``heading`` (e.g. ``"### Try it"``) up to the next heading of its level or above.

    Lines inside fenced blocks are never headings (a shell comment starts with ``#`` too).
    """
    level = len(heading) - len(heading.lstrip("#"))
    lines = readme.splitlines(keepends=True)
    start = next(i for i, line in enumerate(lines) if line.rstrip("\n") == heading) + 1
    fenced = False
    for end in range(start, len(lines)):
        if lines[end].lstrip().startswith("```"):
            fenced = not fenced
        elif not fenced and re.match(rf"#{{1,{level}}} ", lines[end]):
            return "".join(lines[start:end])
    return "".join(lines[start:])


def bash_block(readme: str, heading: str, after: str | None = None) -> str:
    """The first ```` ```bash ```` block under ``heading`` (after the text ``after``, when given)."""
    section = readme_section(readme, heading)
    if after is not None:
        section = section.split(after, 1)[1]
    block = re.search(r"```bash\n(.*?)```", section, re.DOTALL)
    assert block is not None, f"no bash block under {heading!r}" + (f" after {after!r}" if after else "")
    return block.group(1)


def scratch_checkout(repo_root: Path, scratch: Path, files: list[str]) -> dict[str, str]:
    """Copy ``files`` (paths relative to the repository) into ``scratch``; the environment to run in.

    ``cascade`` and ``.venv/bin/cascade`` run this checkout's command; nothing else is on the PATH
    but the system's directories.
    """
    for name in files:
        (scratch / name).parent.mkdir(parents=True, exist_ok=True)
        if (repo_root / name).is_dir():
            shutil.copytree(repo_root / name, scratch / name)
        else:
            shutil.copy(repo_root / name, scratch / name)
    bin_dir = scratch / ".venv" / "bin"
    bin_dir.mkdir(parents=True, exist_ok=True)
    shim = bin_dir / "cascade"
    shim.write_text(f'#!/bin/sh\nexec "{sys.executable}" -m cascade_cli.main "$@"\n')
    shim.chmod(0o755)
    # HOME stays the user's: the local pool's llama-server build is cached under it.
    home = os.environ.get("HOME", "/")
    return {"PATH": f"{bin_dir}:/usr/bin:/bin", "PYTHONPATH": str(repo_root), "HOME": home}


def run_block(
    block: str, scratch: Path, env: dict[str, str], timeout_s: float, *, stops_itself: bool = False
) -> subprocess.CompletedProcess[str]:
    """Run ``block`` with ``bash -euc`` in ``scratch``; whatever it left running is stopped afterwards.

    The block runs in its own session, so a server it started with ``&`` is found by its process
    group: sent SIGTERM (as ``kill %1`` would) and waited for, then killed if it does not stop. A
    block that ``stops_itself`` (ends with ``kill %1``) is first given time to finish stopping, so
    that a second SIGTERM does not interrupt the shutdown it started.
    """
    # Output goes to files, not pipes: a server the block leaves running keeps a pipe open.
    with tempfile.TemporaryFile("w+") as out, tempfile.TemporaryFile("w+") as err:
        process = subprocess.Popen(
            ["bash", "-euc", block],
            cwd=scratch,
            env=env,
            stdout=out,
            stderr=err,
            text=True,
            start_new_session=True,
        )
        note = ""
        try:
            returncode = process.wait(timeout=timeout_s)
        except subprocess.TimeoutExpired:
            note = f"\n(the block did not finish within {timeout_s:.0f} s and was stopped)"
            _stop_group(process.pid)
            process.wait()
            returncode = -1
        else:
            if stops_itself:
                _wait_for_group(process.pid, STOP_GRACE_S)
            _stop_group(process.pid)
        out.seek(0)
        err.seek(0)
        return subprocess.CompletedProcess(process.args, returncode, out.read(), err.read() + note)


def _stop_group(pgid: int) -> None:
    """SIGTERM the process group, wait until no live process is left in it, then SIGKILL the rest."""
    if not _group_alive(pgid):
        return
    with contextlib.suppress(ProcessLookupError):
        os.killpg(pgid, signal.SIGTERM)
    _wait_for_group(pgid, STOP_GRACE_S)
    with contextlib.suppress(ProcessLookupError):
        os.killpg(pgid, signal.SIGKILL)


def _wait_for_group(pgid: int, seconds: float) -> None:
    """Wait until no live process is left in group ``pgid``, or ``seconds`` have passed."""
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline and _group_alive(pgid):
        time.sleep(0.2)


def _group_alive(pgid: int) -> bool:
    """Whether a process of group ``pgid`` still runs (zombies do not count: an orphan's exit status
    is not always collected at once, so a finished group can still be listed)."""
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            state, _ppid, group = stat.read_text().rsplit(")", 1)[1].split()[:3]
        except (OSError, ValueError):
            continue
        if int(group) == pgid and state not in ("Z", "X"):
            return True
    return False
