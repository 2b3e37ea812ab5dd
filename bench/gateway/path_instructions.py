"""Instructions per request of every path of the request path, before and after, in one run (by hand; slow).

The one command a change to the request path reports with (docs/contributing.md). Each row is a
cell: one request shape sent by wrk (``--connections`` clients, ``--seconds`` after a ``--warmup``)
to a server running under valgrind's callgrind, its counters zeroed before and dumped after
(bench/gateway/callgrind_cells.py); instructions executed do not drift with the machine's load the
way wall-clock time does. nginx is the upstream (run_bench.py: the ``--body`` answer as JSON, and
the same answer as an SSE stream of ``chat.completion.chunk`` events with logprobs, usage and
``[DONE]``: 12 events for the 2k body). Rows (``--paths``, default all):

  passthrough       the floor: the minimal Python proxy (passthrough_app.py), measured once
  chat_accept       cascade/accept: the cheap stage scored and accepted (one upstream call)
  chat_escalate     cascade/escalate: scored, escalated, the final stage called (two calls); the
                    final stage asks for no logprobs and is served the answer without them
  chat_escalate_logprobs  the same, the final stage served the scored answer, logprobs and all
                    (the escalate row's yardstick before 2026-12-06: a real upstream sends none)
  keyed_spend       accept with a Redis-stored key with a USD limit (keyed_instructions.py ``spend``)
  keyed_rate1       the same with one per-minute window of requests and tokens (``rate1``)
  responses_accept  accept through POST /v1/responses
  messages_accept   accept through POST /v1/messages
  single            a tier whose route is one model (one unscored call through the cascade path)
  routed            a routed tier: cheap-v1 features computed on the request, one call
  stream_buffered   ``stream: true`` on a ``buffer`` tier: scored whole, accepted, replayed as SSE
  stream_plain      ``stream: true`` to a configured model: the upstream's SSE relayed
  stream_prefix     ``stream: true`` on a ``prefix`` tier (4 tokens): committed, relayed live

The cells of a revision share one ``cascade serve`` (the keyed rows a second one, with a private
Redis). Every row, the floor's too, is reported net of its server's background work (timers,
health checks, about 1-2 M instructions a second): an idle window of ``--seconds`` on the same
server (callgrind_cells.idle_window: zero, sleep, dump) measures its rate, and a row subtracts
that rate times its own window before dividing by its requests; the gross figure is kept in the
JSON (``gross_per_request``). Before 2026-12-06 only the keyed rows were net, so a row that served
fewer requests read high. Before counting, each cell's answer is checked: status 200 and the
decision headers of the path meant (a streamed one also ends with ``[DONE]``); wrk's failed
requests fail the run, and so does a keyed request that fell back to counting in process.

``--before REV`` exports that revision with ``git archive`` into a temporary directory and runs the
same cells against it (``PYTHONPATH`` the export) before the working tree (``PYTHONPATH`` this
checkout); the harness itself (configs, keys, nginx) is this checkout's for both. Printed: a
markdown table (before, after, delta %, floor/path: the floor's instructions over the path's).

``--wall``: instead of callgrind, req/s at ``--wall-connections`` (64) for accept and escalate on one
``cascade serve`` per revision, against the passthrough floor measured before and after them in the
same run (ratios to the floors' mean); wall clock drifts with the machine's load, ratios less.

    cd bench/gateway && ../../.venv/bin/python path_instructions.py --before cb0cc34 \\
        --out results/path-instructions.json
    ../../.venv/bin/python path_instructions.py --before cb0cc34 --paths chat_accept stream_plain --seconds 20
    ../../.venv/bin/python path_instructions.py --before cb0cc34 --wall --seconds 20
    ../../.venv/bin/python path_instructions.py --paths keyed_spend --keep-dumps /tmp/dumps  # then:
    callgrind_annotate --inclusive=yes /tmp/dumps/after-keyed_spend.callgrind | head -60
"""

from __future__ import annotations

import argparse
import contextlib
import json
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx
from callgrind_cells import (
    callgrind_passthrough,
    callgrind_serve,
    counted_wrk,
    failed_requests,
    idle_window,
    net_per_request,
)
from keyed_instructions import add_keys, idle, keyed_config, look_up_once, one_key
from run_bench import (
    ENDPOINTS,
    MESSAGES,
    REPO,
    Upstreams,
    body_for,
    cascade_serve,
    nginx_upstream,
    passthrough_serve,
    redis_for,
    run_wrk,
    upstreams,
    write_gateway_files,
)

CHAT = "/v1/chat/completions"
ACCEPTED = {"x-cascade-escalated": "false", "x-cascade-models-called": "small"}


def _streamed(model: str) -> dict[str, Any]:
    return {"model": model, "messages": MESSAGES, "max_tokens": 16, "stream": True}


@dataclass(frozen=True)
class Cell:
    """One row: the request, which server answers it, and the headers that show the path taken
    (a value None: the header is present)."""

    label: str
    server: str  # "floor" (passthrough_app), "gateway" (cascade serve), "keyed" (with Redis)
    path: str
    request: dict[str, Any]
    expect: dict[str, str | None] = field(default_factory=dict)
    key: str | None = None  # keyed_instructions.KEYS row of a keyed cell


CELLS: dict[str, Cell] = {
    "passthrough": Cell("passthrough floor", "floor", CHAT, body_for("passthrough")),
    "chat_accept": Cell("chat accept", "gateway", CHAT, body_for("accept"), ACCEPTED),
    "chat_escalate": Cell(
        "chat escalate",
        "gateway",
        CHAT,
        body_for("escalate"),
        {"x-cascade-escalated": "true", "x-cascade-models-called": "small,large"},
    ),
    "chat_escalate_logprobs": Cell(
        "chat escalate, final answer with logprobs",
        "gateway",
        CHAT,
        body_for("escalate_logprobs"),
        {"x-cascade-escalated": "true", "x-cascade-models-called": "small,large_logprobs"},
    ),
    "keyed_spend": Cell(
        "keyed accept (USD limit), net", "keyed", CHAT, body_for("accept"), ACCEPTED, "spend"
    ),
    "keyed_rate1": Cell(
        "keyed accept, one per-minute window, net",
        "keyed",
        CHAT,
        body_for("accept"),
        {**ACCEPTED, "x-ratelimit-limit-requests": None},
        "rate1",
    ),
    "responses_accept": Cell(
        "Responses accept", "gateway", ENDPOINTS["responses"][0], ENDPOINTS["responses"][1], ACCEPTED
    ),
    "messages_accept": Cell(
        "Messages accept", "gateway", ENDPOINTS["messages"][0], ENDPOINTS["messages"][1], ACCEPTED
    ),
    "single": Cell(
        "one-model tier", "gateway", CHAT, body_for("single"), {"x-cascade-models-called": "small"}
    ),
    "routed": Cell(
        "routed tier, cheap-v1 features",
        "gateway",
        CHAT,
        body_for("routed"),
        {"x-cascade-mechanism": "routed", "x-cascade-models-called": "small"},
    ),
    "stream_buffered": Cell(
        "streamed accept, buffered tier", "gateway", CHAT, _streamed("cascade/stream_buffer"), ACCEPTED
    ),
    "stream_plain": Cell(
        "streamed plain model",
        "gateway",
        CHAT,
        _streamed("small_stream"),
        {"x-cascade-models-called": "small_stream"},
    ),
    "stream_prefix": Cell(
        "streamed accept, prefix tier (4 tokens)",
        "gateway",
        CHAT,
        _streamed("cascade/stream_prefix"),
        {
            "x-cascade-escalated": "false",
            "x-cascade-models-called": "small_stream",
            "x-cascade-commit": "prefix",
        },
    ),
}
WALL_CELLS = ("chat_accept", "chat_escalate")


def check_cell(base: str, name: str, api_key: str | None = None) -> None:
    """One request of the cell: 200, the path's headers, a whole answer (JSON, or SSE to [DONE])."""
    cell = CELLS[name]
    headers = {"authorization": f"Bearer {api_key}"} if api_key else {}
    answer = httpx.post(base + cell.path, json=cell.request, headers=headers, timeout=120)
    if answer.status_code != 200:
        raise RuntimeError(f"{name}: status {answer.status_code}: {answer.text[:300]}")
    for header, value in cell.expect.items():
        seen = answer.headers.get(header)
        if seen is None or (value is not None and seen != value):
            raise RuntimeError(f"{name}: header {header} is {seen!r}, not {value!r}: {dict(answer.headers)}")
    if cell.request.get("stream"):
        if not answer.headers["content-type"].startswith("text/event-stream"):
            raise RuntimeError(f"{name}: not an event stream: {answer.headers}")
        if not answer.text.rstrip().endswith("data: [DONE]"):
            raise RuntimeError(f"{name}: the stream did not end with [DONE]: {answer.text[-300:]}")
    else:
        answer.json()


def keep_dump(args: argparse.Namespace, out_dir: Path, pid: int, name: str) -> None:
    """With ``--keep-dumps DIR``: the cell's dump (the newest of ``pid``) copied to
    ``DIR/<revision>-<cell>.callgrind``, for ``callgrind_annotate --inclusive=yes``."""
    if args.keep_dumps is None:
        return
    newest = max(out_dir.glob(f"callgrind.{pid}.*"), key=lambda p: p.stat().st_mtime)
    args.keep_dumps.mkdir(parents=True, exist_ok=True)
    shutil.copy(newest, args.keep_dumps / f"{out_dir.name.split('-')[0]}-{name}.callgrind")


def count_cell(
    args: argparse.Namespace, base: str, pid: int, out_dir: Path, name: str, background: dict[str, float]
) -> dict[str, Any]:
    """Instructions per request of an unkeyed cell on the running server ``pid``, net of its
    ``background`` (callgrind_cells.idle_window) over the cell's window, and gross."""
    cell = CELLS[name]
    result, total = counted_wrk(base + cell.path, cell.request, pid, out_dir, args)
    keep_dump(args, out_dir, pid, name)
    n = result["requests"]
    row = {
        "requests": n,
        "seconds": result["window_s"],
        "instructions": total,
        "gross_per_request": total / n,
        "per_request": net_per_request(total, n, result["window_s"], background["instructions_per_s"]),
        "idle": background,
    }
    print(
        f"  {name:<17} {n} requests, {row['per_request'] / 1e6:.3f} M instr/request net "
        f"({row['gross_per_request'] / 1e6:.3f} M gross)",
        flush=True,
    )
    return row


def idle_row(args: argparse.Namespace, pid: int, out_dir: Path) -> dict[str, float]:
    """The server's background instructions per second (an idle window of ``--seconds``)."""
    background = idle_window(pid, out_dir, args.seconds)
    print(f"  idle              {background['instructions_per_s'] / 1e6:.3f} M instr/s", flush=True)
    return background


def gateway_rows(
    args: argparse.Namespace, out_dir: Path, pythonpath: str, urls: Upstreams, names: list[str]
) -> dict[str, Any]:
    """The unkeyed cells on one ``cascade serve`` of the code at ``pythonpath``."""
    config = write_gateway_files(
        out_dir, urls.json, body=args.body, stream_upstream=urls.sse, final_upstream=urls.final
    )
    with callgrind_serve(config, out_dir, args.server_cpu, pythonpath) as (base, pid):
        for name in names:
            check_cell(base, name)
        background = idle_row(args, pid, out_dir)
        return {name: count_cell(args, base, pid, out_dir, name, background) for name in names}


def keyed_rows(
    args: argparse.Namespace, out_dir: Path, pythonpath: str, upstream: str, redis_url: str, names: list[str]
) -> dict[str, Any]:
    """The keyed cells on one ``cascade serve`` with Redis, net of its idle background work."""
    config = keyed_config(out_dir, upstream, redis_url, args.body)
    keys = add_keys(redis_url)
    with callgrind_serve(config, out_dir, args.server_cpu, pythonpath) as (base, pid):
        look_up_once(base, keys)
        for name in names:
            check_cell(base, name, keys[CELLS[name].key or ""])
        background = idle(args, pid, out_dir, redis_url)
        rows = {}
        for name in names:
            key = CELLS[name].key or ""
            row = one_key(
                args, base, pid, out_dir, redis_url, key, keys[key], background["instructions_per_s"]
            )
            keep_dump(args, out_dir, pid, name)
            rows[name] = {**row, "per_request": row["net_instructions_per_request"], "idle": background}
    return rows


def floor_row(args: argparse.Namespace, out_dir: Path, upstream: str) -> dict[str, Any]:
    """The passthrough floor under callgrind."""
    with callgrind_passthrough(upstream, out_dir, args.server_cpu) as (url, pid):
        check_cell(url.removesuffix(CHAT), "passthrough")
        background = idle_row(args, pid, out_dir)
        return count_cell(args, url.removesuffix(CHAT), pid, out_dir, "passthrough", background)


def revision_rows(
    args: argparse.Namespace,
    tmp: Path,
    label: str,
    pythonpath: str,
    urls: Upstreams,
    redis_url: str | None,
) -> dict[str, Any]:
    """Every selected cell of one revision (the floor only with the working tree)."""
    print(f"{label} (PYTHONPATH={pythonpath})", flush=True)
    rows: dict[str, Any] = {}
    by_server = {s: [n for n in args.paths if CELLS[n].server == s] for s in ("floor", "gateway", "keyed")}
    if by_server["floor"] and label == "after":
        (tmp / "floor").mkdir()
        rows["passthrough"] = floor_row(args, tmp / "floor", urls.json)
    if by_server["gateway"]:
        (tmp / f"{label}-gateway").mkdir()
        rows.update(gateway_rows(args, tmp / f"{label}-gateway", pythonpath, urls, by_server["gateway"]))
    if by_server["keyed"]:
        assert redis_url is not None
        (tmp / f"{label}-keyed").mkdir()
        rows.update(
            keyed_rows(args, tmp / f"{label}-keyed", pythonpath, urls.json, redis_url, by_server["keyed"])
        )
    return rows


@contextlib.contextmanager
def exported(rev: str | None, tmp: Path) -> Iterator[str | None]:
    """``rev`` of this repository exported with ``git archive`` into ``tmp``; yields its path."""
    if rev is None:
        yield None
        return
    target = tmp / f"export-{rev}"
    target.mkdir()
    archive = subprocess.run(["git", "-C", str(REPO), "archive", rev], check=True, capture_output=True).stdout
    subprocess.run(["tar", "-x", "-C", str(target)], input=archive, check=True)
    yield str(target)


def instruction_table(rows: dict[str, dict[str, Any]], before: str | None) -> str:
    """The markdown table: M instructions per request before and after, delta, floor/path."""
    floor = rows.get("passthrough", {}).get("after", {}).get("per_request")
    lines = [
        f"| path | before ({before or '-'}) M | after M | delta | floor/path |",
        "|---|---:|---:|---:|---:|",
    ]
    for name, row in rows.items():
        after = row["after"]["per_request"]
        old = row.get("before", {}).get("per_request")
        delta = f"{(after - old) / old * 100:+.1f}%" if old else "-"
        ratio = f"{floor / after:.3f}" if floor else "-"
        old_text = f"{old / 1e6:.3f}" if old else "-"
        lines.append(f"| {CELLS[name].label} | {old_text} | {after / 1e6:.3f} | {delta} | {ratio} |")
    return "\n".join(lines)


def instructions_mode(args: argparse.Namespace, tmp: Path, urls: Upstreams, redis_url: str | None) -> Any:
    """Every selected cell, before (with ``--before``) and after; the rows by cell."""
    by_revision: dict[str, dict[str, Any]] = {}
    with exported(args.before, tmp) as before_path:
        if before_path is not None:
            by_revision["before"] = revision_rows(args, tmp, "before", before_path, urls, redis_url)
        by_revision["after"] = revision_rows(args, tmp, "after", str(REPO), urls, redis_url)
    rows = {
        name: {label: found[name] for label, found in by_revision.items() if name in found}
        for name in args.paths
    }
    print("\n" + instruction_table(rows, args.before))
    return rows


def wall_rps(url: str, request: dict[str, Any], args: argparse.Namespace) -> float:
    """req/s of wrk at ``--wall-connections`` for ``--seconds`` after a warm-up (no failed request)."""
    run_wrk(url, request, args.wall_connections, args.warmup, args.client_cpu)
    result = run_wrk(url, request, args.wall_connections, args.seconds, args.client_cpu)
    if failed_requests(result):
        raise RuntimeError(f"{url}: failed requests: {result}")
    return float(result["rps"])


def wall_mode(args: argparse.Namespace, tmp: Path, urls: Upstreams) -> Any:
    """req/s of accept and escalate per revision against the floor measured before and after them."""
    floors: list[float] = []

    def floor() -> None:
        with passthrough_serve(tmp, urls.json, args.server_cpu) as (url, _):
            floors.append(wall_rps(url, CELLS["passthrough"].request, args))
            print(f"  floor {floors[-1]:.0f} req/s", flush=True)

    floor()
    rps: dict[str, dict[str, float]] = {}
    with exported(args.before, tmp) as before_path:
        revisions = ([("before", before_path)] if before_path else []) + [("after", str(REPO))]
        for label, pythonpath in revisions:
            (tmp / f"wall-{label}").mkdir()
            config = write_gateway_files(
                tmp / f"wall-{label}", urls.json, body=args.body, final_upstream=urls.final
            )
            env = {"PYTHONPATH": pythonpath}
            with cascade_serve(tmp, config, args.server_cpu, env, log_name=f"wall-{label}") as (base, _):
                for name in WALL_CELLS:
                    check_cell(base, name)
                rps[label] = {
                    name: wall_rps(base + CELLS[name].path, CELLS[name].request, args) for name in WALL_CELLS
                }
            print(f"  {label}: {rps[label]}", flush=True)
    floor()
    mean_floor = sum(floors) / len(floors)
    print(f"\nfloor {' and '.join(f'{f:.0f}' for f in floors)} req/s at c={args.wall_connections}\n")
    print("| path | before req/s | after req/s | before / floor | after / floor |\n|---|---:|---:|---:|---:|")
    for name in WALL_CELLS:
        old = rps.get("before", {}).get(name)
        new = rps["after"][name]
        old_text = f"| {old:.0f} " if old else "| - "
        ratio_text = f"| {old / mean_floor:.3f} " if old else "| - "
        print(f"| {CELLS[name].label} {old_text}| {new:.0f} {ratio_text}| {new / mean_floor:.3f} |")
    return {"floor_rps": floors, "rps": rps}


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--paths", nargs="+", choices=list(CELLS), default=list(CELLS))
    parser.add_argument("--before", metavar="REV", help="also measure this git revision (git archive export)")
    parser.add_argument("--body", default="2k", help="upstream body (run_bench.py BODIES)")
    parser.add_argument(
        "--seconds", type=int, default=30, help="measured wrk run per cell (slowed ~50x by callgrind)"
    )
    parser.add_argument("--warmup", type=int, default=5)
    parser.add_argument("--connections", type=int, default=8)
    parser.add_argument("--server-cpu", default="1")
    parser.add_argument("--client-cpu", default="0")
    parser.add_argument("--redis", default="auto", help="for the keyed rows; auto: a private redis-server")
    parser.add_argument("--wall", action="store_true", help="req/s against the floor instead of instructions")
    parser.add_argument("--wall-connections", type=int, default=64)
    parser.add_argument("--keep-dumps", type=Path, metavar="DIR", help="keep each cell's callgrind dump here")
    parser.add_argument("--out", type=Path)
    args = parser.parse_args()
    keyed = not args.wall and any(CELLS[name].server == "keyed" for name in args.paths)
    with tempfile.TemporaryDirectory(prefix="cascade-path-instr-") as name:
        tmp = Path(name)
        with (
            nginx_upstream(tmp, args.client_cpu) as nginx_port,
            redis_for(args, tmp) if keyed else contextlib.nullcontext() as redis_url,
        ):
            urls = upstreams(nginx_port, args.body)
            started = time.monotonic()
            results = (
                wall_mode(args, tmp, urls) if args.wall else instructions_mode(args, tmp, urls, redis_url)
            )
    print(f"\n{time.monotonic() - started:.0f} s")
    if args.out:
        document = {
            "command": " ".join(["bench/gateway/path_instructions.py", *sys.argv[1:]]),
            "args": {k: str(v) for k, v in vars(args).items()},
            "results": results,
        }
        args.out.write_text(json.dumps(document, indent=2) + "\n")


if __name__ == "__main__":
    main()
