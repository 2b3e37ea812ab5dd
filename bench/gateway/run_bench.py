"""Gateway latency/throughput benchmark on loopback (run by hand; see docs/benchmarks.md).

One run measures, for each upstream body (``--bodies``: a 2.7 KB chat.completion with 8 tokens x
top-5 logprobs, and the 25.6 KB llama-server answer with 8 tokens x top-15), with wrk at each
concurrency (default 1, 16, 64 connections, 10 s each):

  direct        wrk -> nginx (the upstream: a fixed, real-shaped chat.completion with logprobs)
  passthrough   wrk -> minimal FastAPI + aiohttp + orjson proxy -> nginx (the floor for a Python proxy)
  model         wrk -> gateway, model "small": plain passthrough of a configured model (1 upstream call)
  accept        wrk -> gateway, model cascade/accept: cheap call, scored, accepted (1 upstream call)
  escalate      wrk -> gateway, model cascade/escalate: cheap call, scored, escalated (2 upstream calls)
  single        wrk -> gateway, model cascade/single: a tier whose route is the one model small (one
                unscored call through the cascade path): routed's baseline without the router
  routed        wrk -> gateway, model cascade/routed: a routed tier (cheap-v1 router features computed
                on the request, then one unscored call to the model the router picks: small)
  accept_keyed  (with ``--redis``) accept on a gateway with Redis, a client key and a spend limit
  accept_learning  (with ``--learning RATE``) accept on a gateway that samples RATE of its requests
                into a JSONL traffic store (shadow calls to the upstream, exact judge); the sampler's
                counters (sampled, dropped, rows written) are printed after it
  accept_<api>  (with ``--endpoints``) the accept path through a translated API (``responses``:
                POST /v1/responses, ``messages``: POST /v1/messages) on the same gateway process,
                right after chat's accept: the translation's cost is its req/s against accept's

The gateway runs as ``cascade serve`` itself (the real CLI process: one uvicorn worker, uvloop +
httptools); the passthrough under uvicorn with the same flags. The server under test is pinned to
CPU ``--server-cpu``; nginx (one worker), wrk (one thread) and a ``--redis auto`` Redis share CPU
``--client-cpu``. Added latency = target percentile - direct percentile at the same concurrency.

Needs the Debian packages ``nginx`` and ``wrk``. ``cascade`` and Python come from the virtualenv of
the interpreter that runs this script. Examples:

    .venv/bin/python bench/gateway/run_bench.py --duration 10 --redis auto --out bench/gateway/results.json
    .venv/bin/python bench/gateway/run_bench.py --targets accept --learning 0.01   # learning off vs on
    .venv/bin/python bench/gateway/run_bench.py --targets accept --endpoints responses messages
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import re
import shutil
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any, NamedTuple

import httpx

REPO = Path(__file__).resolve().parents[2]
HERE = Path(__file__).resolve().parent
FIXTURE = REPO / "tests" / "fixtures" / "upstream" / "native_smol_top15.json"
# name -> (upstream body nginx returns, top-K the policy's scorer uses on it)
BODIES: dict[str, tuple[Path, int]] = {
    "2k": (HERE / "fixtures" / "chat_top5_8tok.json", 5),
    "25k": (FIXTURE, 15),
}
MESSAGES = [{"role": "user", "content": "What is the capital of France? Answer in one sentence."}]
# The translated APIs (gateway.api.edges): path, and the request of the accept path in that API.
QUESTION = MESSAGES[0]["content"]
ENDPOINTS: dict[str, tuple[str, dict[str, Any]]] = {
    "responses": ("/v1/responses", {"model": "cascade/accept", "input": QUESTION, "max_output_tokens": 16}),
    "messages": ("/v1/messages", {"model": "cascade/accept", "messages": MESSAGES, "max_tokens": 16}),
}
TARGETS = (
    "direct",
    "passthrough",
    "model",
    "accept",
    *(f"accept_{api}" for api in ENDPOINTS),
    "escalate",
    "single",
    "routed",
    "accept_keyed",
    "accept_learning",
)
GATEWAY_TARGETS = ("model", "accept", "escalate", "single", "routed")

NGINX_CONF = """
worker_processes 1;
daemon off;
pid {tmp}/nginx.pid;
error_log {tmp}/nginx-error.log warn;
events {{ worker_connections 4096; }}
http {{
    access_log off;
    client_body_temp_path {tmp}/body;
    proxy_temp_path {tmp}/proxy;
    fastcgi_temp_path {tmp}/fastcgi;
    uwsgi_temp_path {tmp}/uwsgi;
    scgi_temp_path {tmp}/scgi;
    keepalive_requests 10000000;
    keepalive_timeout 300s;
    server {{
        listen 127.0.0.1:{port} backlog=4096;
        root {tmp}/www;
        # /<body>/v1/chat/completions: the static module answers POST with 405; turn that into the
        # file's 200 (method becomes GET). /<body>/sse/v1/...: the same answer as an SSE stream.
        location ~ /sse/v1/chat/completions$ {{
            default_type text/event-stream;
            error_page 405 =200 $uri;
        }}
        location ~ /v1/chat/completions$ {{
            default_type application/json;
            error_page 405 =200 $uri;
        }}
        location ~ /v1/models$ {{
            default_type application/json;
            return 200 '{{"object": "list", "data": []}}';
        }}
    }}
}}
"""


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def wait_http(url: str, timeout_s: float = 20.0, method: str = "GET", body: Any = None) -> None:
    end = time.monotonic() + timeout_s
    while time.monotonic() < end:
        try:
            httpx.request(method, url, json=body, timeout=2)
            return
        except httpx.HTTPError:
            time.sleep(0.1)
    raise RuntimeError(f"{url} did not come up within {timeout_s}s")


@contextlib.contextmanager
def process(
    cmd: list[str], env: dict[str, str] | None = None, log: Path | None = None
) -> Iterator[subprocess.Popen[bytes]]:
    """Run ``cmd`` for the duration of the block; stop it (and only it) afterwards."""
    out = open(log, "wb") if log else subprocess.DEVNULL  # noqa: SIM115
    proc = subprocess.Popen(cmd, env=env, stdout=out, stderr=subprocess.STDOUT, start_new_session=True)
    try:
        yield proc
    finally:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGTERM)
        try:
            proc.wait(10)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
        if log:
            out.close()


def sse_stream(answer: dict[str, Any]) -> bytes:
    """The streamed form of a chat.completion with logprobs, as an OpenAI-compatible server sends
    it with ``stream_options.include_usage``: a role chunk, one content chunk per token (its
    logprob entry), the finish chunk, the usage chunk, ``[DONE]`` (12 events for the 2k body)."""
    head = {k: answer[k] for k in ("id", "created", "model", "system_fingerprint") if k in answer}
    head["object"] = "chat.completion.chunk"
    choice = answer["choices"][0]

    def chunk(delta: dict[str, Any], **fields: Any) -> dict[str, Any]:
        return {**head, "choices": [{"index": 0, "delta": delta, "finish_reason": None, **fields}]}

    chunks = [chunk({"role": "assistant", "content": ""})]
    chunks += [
        chunk({"content": entry["token"]}, logprobs={"content": [entry]})
        for entry in choice["logprobs"]["content"]
    ]
    chunks.append(chunk({}, finish_reason=choice["finish_reason"]))
    chunks.append({**head, "choices": [], "usage": answer["usage"]})
    events = [f"data: {json.dumps(c, separators=(',', ':'))}\n\n" for c in chunks] + ["data: [DONE]\n\n"]
    return "".join(events).encode()


class Upstreams(NamedTuple):
    """The base URLs nginx serves a body at (``nginx_upstream``)."""

    json: str  # the answer, with the logprobs a scored stage asks for
    sse: str  # the same answer streamed (``sse_stream``)
    final: str  # the answer without logprobs (``null``), as a final stage, which asks for none, gets it


def upstreams(nginx_port: int, body: str) -> Upstreams:
    """The base URLs nginx serves ``body`` at."""
    base = f"http://127.0.0.1:{nginx_port}/{body}"
    return Upstreams(f"{base}/v1", f"{base}/sse/v1", f"{base}/final/v1")


def unscored(answer: dict[str, Any]) -> dict[str, Any]:
    """``answer`` as an upstream sends it to a request that asked for no logprobs."""
    return {**answer, "choices": [{**choice, "logprobs": None} for choice in answer["choices"]]}


@contextlib.contextmanager
def nginx_upstream(tmp: Path, cpu: str) -> Iterator[int]:
    """nginx (one worker, pinned to ``cpu``) serving each body at ``/<body>/v1``, its SSE form
    (``sse_stream``, as ``text/event-stream``) at ``/<body>/sse/v1`` and its form without logprobs
    (``unscored``) at ``/<body>/final/v1``; yields the port."""
    for name, (fixture, _) in BODIES.items():
        if not fixture.exists():  # the 25k body lives beside the checkout; --bodies 2k runs without it
            continue
        (tmp / "www" / name / "v1" / "chat").mkdir(parents=True)
        shutil.copy(fixture, tmp / "www" / name / "v1" / "chat" / "completions")
        answer = json.loads(fixture.read_text())
        (tmp / "www" / name / "final" / "v1" / "chat").mkdir(parents=True)
        final = json.dumps(unscored(answer), separators=(",", ":"))
        (tmp / "www" / name / "final" / "v1" / "chat" / "completions").write_text(final)
        (tmp / "www" / name / "sse" / "v1" / "chat").mkdir(parents=True)
        streamed = sse_stream(answer)
        (tmp / "www" / name / "sse" / "v1" / "chat" / "completions").write_bytes(streamed)
    os.chmod(tmp, 0o755)  # nginx workers run unprivileged
    port = free_port()
    (tmp / "nginx.conf").write_text(NGINX_CONF.format(tmp=tmp, port=port))
    nginx = shutil.which("nginx") or "/usr/sbin/nginx"
    with process(
        ["taskset", "-c", cpu, nginx, "-p", str(tmp), "-c", str(tmp / "nginx.conf")], log=tmp / "nginx.out"
    ):
        wait_http(f"http://127.0.0.1:{port}/2k/v1/models")
        for name in (name for name, (fixture, _) in BODIES.items() if fixture.exists()):
            base = f"http://127.0.0.1:{port}/{name}"
            check = httpx.post(f"http://127.0.0.1:{port}/{name}/v1/chat/completions", json={}, timeout=5)
            assert check.status_code == 200 and check.json()["choices"][0]["logprobs"], check.text[:200]
            final = httpx.post(f"{base}/final/v1/chat/completions", json={}, timeout=5)
            unasked = final.status_code == 200 and final.json()["choices"][0]["logprobs"] is None
            assert unasked, final.text[:200]
            check = httpx.post(f"http://127.0.0.1:{port}/{name}/sse/v1/chat/completions", json={}, timeout=5)
            assert check.headers["content-type"] == "text/event-stream", check.headers
            assert check.text.endswith("data: [DONE]\n\n"), check.text[-200:]
        yield port


def shift_reference_for(score: float) -> dict[str, Any]:
    """A ``shift_reference`` of tier ``accept`` whose calibration scored ``score`` on every row and
    never escalated: the benchmark's traffic matches it, so the alarm tests every block and stays
    quiet (ten decile edges around the score, as calibration writes them)."""
    edges = [round(score - 0.5 + 0.1 * i, 4) for i in range(9)]
    counts = [0.0] * 10
    counts[sum(1 for edge in edges if edge <= score)] = 1000.0
    reference = {"model": "small", "score": {"edges": edges, "counts": counts}, "escalation": [1000.0, 0.0]}
    return {"calibration_rows": 1000, "tiers": {"accept": reference}}


def write_gateway_files(
    tmp: Path,
    upstream: str,
    redis_url: str | None = None,
    body: str = "25k",
    learning_rate: float | None = None,
    stream_upstream: str | None = None,
    final_upstream: str | None = None,
) -> Path:
    """Config + policy: tier ``accept`` passes the body's score, tier ``escalate`` fails it.

    ``learning_rate``: add a ``learning:`` section sampling that share of requests into a JSONL file
    store in ``tmp`` (reference ``large``, exact judge, a shadow spend cap that never binds).
    ``stream_upstream``: the SSE form of the body (``upstreams``): add its models and the streamed
    tiers (``stream_tiers``).
    ``final_upstream``: the body without logprobs (``upstreams``): model ``large`` (the final stage
    of every tier; it asks for no logprobs) is served that, as a real upstream would answer it, and
    tier ``escalate_logprobs`` escalates to ``large_logprobs``, the same model served the scored
    answer (what ``large`` was served before 2026-12-06).
    """
    sys.path.insert(0, str(REPO))
    from policies import build_policy, save_policy, score_response

    fixture_path, top_k = BODIES[body]
    fixture = json.loads(fixture_path.read_text())
    score = score_response(fixture, "mean_token_negentropy", top_k)
    assert score is not None
    tiers: dict[str, Any] = {}
    for name, threshold in (("accept", score - 0.2), ("escalate", min(score + 0.2, 1.0))):
        tiers[name] = {
            "objective": {"max_cost_usd": 0.001},
            "routes": [{"weight": 1.0, "models": ["small", "large"], "thresholds": [round(threshold, 4)]}],
            "expected": {"cost_usd": 0.0005, "quality": 0.7, "escalation_rate": 0.5},
        }
    # A routed tier: the router reads the request's cheap-v1 features and picks small (its
    # probability 0.88 against large's 0.73 at price weight 0), one call, no score.
    from policies.route_features import CHEAP, feature_dims

    dims = feature_dims(CHEAP)
    router = {
        "features": CHEAP,
        "models": ["small", "large"],
        "cost_usd": [0.0001, 0.001],
        "coef": [[0.0] * dims, [0.0] * dims],
        "intercept": [2.0, 1.0],
    }
    tiers["routed"] = {**tiers["accept"], "routing": {"mechanism": "routed", "price_weight": 0.0}}
    tiers["single"] = {**tiers["accept"], "routes": [{"weight": 1.0, "models": ["small"], "thresholds": []}]}
    policy_models = {
        "small": {"mean_cost_usd": 0.0001, "quality": 0.5},
        "large": {"mean_cost_usd": 0.001, "quality": 0.8},
    }
    if stream_upstream is not None:
        tiers.update(stream_tiers(tiers["accept"], fixture, top_k))
        policy_models.update({f"{name}_stream": policy_models[name] for name in ("small", "large")})
    if final_upstream is not None:
        route = {**tiers["escalate"]["routes"][0], "models": ["small", "large_logprobs"]}
        tiers["escalate_logprobs"] = {**tiers["escalate"], "routes": [route]}
        policy_models["large_logprobs"] = policy_models["large"]
    document: dict[str, Any] = {
        "scorer": {"name": "mean_token_negentropy", "top_k": top_k},
        "models": policy_models,
        "default_tier": "accept",
        "tiers": tiers,
        "router": router,
    }
    if os.environ.get("BENCH_SHIFT_REFERENCE"):  # tier accept watched by the shift alarm
        document["shift_reference"] = shift_reference_for(score)
    policy = build_policy(document)
    save_policy(policy, tmp / f"policy-{body}.json")
    model = {"base_url": upstream, "timeout_s": 30, "max_retries": 0}
    config = {
        "models": {
            "small": {**model, "model": "smollm2-135m", "price": {"per_query_usd": 0.0001}},
            "large": {**model, "model": "qwen2.5-0.5b", "price": {"per_query_usd": 0.001}},
        },
        "policy": str(tmp / f"policy-{body}.json"),
        "redis_url": redis_url,
        "auth": {"open": True},  # the benchmark measures the request path, not key checks
        "logging": {"level": os.environ.get("BENCH_LOG_LEVEL", "info")},
    }
    if stream_upstream is not None:  # the same models, served the streamed form of the answer
        for name in ("small", "large"):
            config["models"][f"{name}_stream"] = {**config["models"][name], "base_url": stream_upstream}
    if final_upstream is not None:
        config["models"]["large_logprobs"] = config["models"]["large"]
        config["models"]["large"] = {**config["models"]["large"], "base_url": final_upstream}
    name = f"gateway-{body}" + ("-redis" if redis_url else "")
    if learning_rate is not None:
        name += "-learning"
        config["learning"] = {
            "enabled": True,
            "sample_rate": learning_rate,
            "reference_model": "large",
            "judge": {"kind": "exact"},
            "store": str(tmp / f"traffic-{body}.jsonl"),
            "max_shadow_usd_per_hour": 1e9,  # measure the sampler's work, not the cap's refusals
        }
    import yaml

    path = tmp / f"{name}.yaml"
    path.write_text(yaml.safe_dump(config))
    return path


def stream_tiers(accept: dict[str, Any], answer: dict[str, Any], top_k: int) -> dict[str, Any]:
    """The streamed tiers, both accepting ``answer``: ``stream_buffer`` (accept's route with the
    ``buffer`` commit rule: the cheap stage's JSON answer scored whole, then replayed as a stream) and
    ``stream_prefix`` (the ``*_stream`` models with a ``prefix`` rule of 4 tokens: the cheap stage
    streamed, its first 4 tokens scored, committed, the rest relayed live)."""
    from policies import score_logprobs
    from policies.commit import prefix_entries

    tokens = 4
    content = answer["choices"][0]["logprobs"]["content"]
    score = score_logprobs(prefix_entries(content, tokens), "mean_token_negentropy", top_k)
    assert score is not None
    prefix_route = {
        "weight": 1.0,
        "models": ["small_stream", "large_stream"],
        "thresholds": [round(score - 0.2, 4)],
    }
    return {
        "stream_buffer": {**accept, "commit": {"rule": "buffer"}},
        "stream_prefix": {**accept, "routes": [prefix_route], "commit": {"rule": "prefix", "tokens": tokens}},
    }


def run_wrk(
    url: str, body: dict[str, Any], connections: int, duration_s: int, cpu: str, api_key: str = ""
) -> dict[str, Any]:
    env = {**os.environ, "WRK_BODY": json.dumps(body), "WRK_AUTH": api_key}
    cmd = [
        "taskset",
        "-c",
        cpu,
        "wrk",
        "-t1",
        f"-c{connections}",
        f"-d{duration_s}s",
        "--timeout",
        "10s",
        "-s",
        str(HERE / "wrk_post.lua"),
        url,
    ]
    out = subprocess.run(cmd, env=env, capture_output=True, text=True, check=True).stdout
    line = next(line for line in out.splitlines() if line.startswith("WRK_JSON "))
    result = json.loads(line[len("WRK_JSON ") :])
    result["rps"] = result["requests"] / (result["duration_us"] / 1e6)
    return result


def body_for(target: str) -> dict[str, Any]:
    api = target.removeprefix("accept_")
    if api in ENDPOINTS:
        return ENDPOINTS[api][1]
    model = {
        "direct": "smollm2-135m",
        "passthrough": "x",
        "accept": "cascade/accept",
        "accept_keyed": "cascade/accept",
        "accept_learning": "cascade/accept",
        "escalate": "cascade/escalate",
        "escalate_logprobs": "cascade/escalate_logprobs",
        "routed": "cascade/routed",
        "single": "cascade/single",
        "model": "small",
    }[target]
    return {"model": model, "messages": MESSAGES, "max_tokens": 16}


def check_paths(gateway_url: str) -> None:
    """Each gateway target takes the intended path (fail fast instead of benchmarking the wrong thing)."""
    for target, escalated, called in (("accept", "false", "small"), ("escalate", "true", "small,large")):
        response = httpx.post(gateway_url + "/v1/chat/completions", json=body_for(target), timeout=10)
        response.raise_for_status()
        assert response.headers["x-cascade-escalated"] == escalated, (target, response.headers)
        assert response.headers["x-cascade-models-called"] == called, (target, response.headers)
        assert response.json()["choices"][0]["message"]["content"]
    plain = httpx.post(gateway_url + "/v1/chat/completions", json=body_for("model"), timeout=10)
    plain.raise_for_status()
    routed = httpx.post(gateway_url + "/v1/chat/completions", json=body_for("routed"), timeout=10)
    routed.raise_for_status()
    assert routed.headers["x-cascade-mechanism"] == "routed", routed.headers
    assert routed.headers["x-cascade-models-called"] == "small", routed.headers


def check_endpoint(gateway_url: str, api: str) -> None:
    """The translated API's accept request is served, accepted by the cheap model."""
    path, body = ENDPOINTS[api]
    response = httpx.post(gateway_url + path, json=body, timeout=10)
    response.raise_for_status()
    assert response.headers["x-cascade-escalated"] == "false", (api, response.headers)
    assert response.headers["x-cascade-models-called"] == "small", (api, response.headers)


def cpu_seconds(pid: int) -> float:
    """User + system CPU time a process has used so far (from /proc)."""
    fields = Path(f"/proc/{pid}/stat").read_text().rpartition(")")[2].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def measure(
    url: str, target: str, args: argparse.Namespace, server_pid: int | None = None, api_key: str = ""
) -> dict[int, dict[str, Any]]:
    """wrk at each concurrency; with ``server_pid`` also the server's CPU time per request.

    CPU per request is the steadiest number on a shared machine: other processes stretch latency
    and cut throughput, but barely change how much CPU one request costs the server.
    """
    results = {}
    for connections in args.connections:
        run_wrk(url, body_for(target), connections, args.warmup, args.client_cpu, api_key)  # warm-up
        cpu_before = cpu_seconds(server_pid) if server_pid else 0.0
        result = run_wrk(url, body_for(target), connections, args.duration, args.client_cpu, api_key)
        if server_pid:
            used = cpu_seconds(server_pid) - cpu_before
            result["server_cpu_us_per_req"] = used / result["requests"] * 1e6
        bad = result["non_2xx"] + result["connect_errors"] + result["read_errors"] + result["timeouts"]
        if bad:
            raise RuntimeError(f"{target} at {connections} connections: {bad} failed requests: {result}")
        results[connections] = result
        print(
            f"  {target:<12} c={connections:<3} {result['rps']:>8.0f} req/s"
            f"  p50 {result['p50_us'] / 1000:7.3f} ms  p99 {result['p99_us'] / 1000:7.3f} ms"
            + (f"  server CPU {result['server_cpu_us_per_req']:.0f} us/req" if server_pid else ""),
            flush=True,
        )
    return results


def passthrough_command(port: int) -> list[str]:
    """The passthrough floor (bench/gateway/passthrough_app.py) under uvicorn with the gateway's
    flags (uvloop, httptools), on ``port``; run it with ``UPSTREAM`` and ``PYTHONPATH=REPO``."""
    flags = ["--loop", "uvloop", "--http", "httptools", "--no-access-log", "--log-level", "warning"]
    return [sys.executable, "-m", "uvicorn", "bench.gateway.passthrough_app:app", "--port", str(port), *flags]


@contextlib.contextmanager
def passthrough_serve(
    tmp: Path, upstream: str, cpu: str, log_name: str = "passthrough"
) -> Iterator[tuple[str, int]]:
    """The passthrough floor pinned to ``cpu``, proxying to ``upstream``; yields (URL, pid)."""
    port = free_port()
    env = {**os.environ, "UPSTREAM": upstream, "PYTHONPATH": str(REPO)}
    with process(
        ["taskset", "-c", cpu, *passthrough_command(port)], env=env, log=tmp / f"{log_name}.log"
    ) as server:
        url = f"http://127.0.0.1:{port}/v1/chat/completions"
        wait_http(url, method="POST", body=body_for("passthrough"))
        yield url, server.pid  # taskset execs the command: same pid


@contextlib.contextmanager
def cascade_serve(
    tmp: Path, config: Path, cpu: str, env_extra: dict[str, str] | None = None, log_name: str = "gateway"
) -> Iterator[tuple[str, int]]:
    """``cascade serve`` (the real CLI process) pinned to ``cpu``; yields (base URL, pid).

    CASCADE_* variables of the calling shell are dropped (an open, file-policy gateway unless the
    config says otherwise); ``env_extra`` adds some back.
    """
    port = free_port()
    env = {k: v for k, v in os.environ.items() if not k.startswith("CASCADE_")}
    env.update(env_extra or {})
    cascade = str(Path(sys.executable).with_name("cascade"))
    cmd = ["taskset", "-c", cpu, cascade, "serve", "--config", str(config), "--port", str(port)]
    with process(cmd, env=env, log=tmp / f"{log_name}.log") as server:
        base = f"http://127.0.0.1:{port}"
        wait_http(base + "/healthz", timeout_s=60)  # start-up imports take long on a busy machine
        yield base, server.pid  # taskset execs the command: same pid


def one_round(args: argparse.Namespace, tmp: Path, nginx_port: int) -> dict[str, Any]:
    """Every target for every body: ``{body: {target: {connections: wrk result}}}``."""
    out: dict[str, Any] = {}
    for body in args.bodies:
        print(f" body {body}", flush=True)
        out[body] = one_body(args, tmp, nginx_port, body)
    return out


def one_body(args: argparse.Namespace, tmp: Path, nginx_port: int, body: str) -> dict[str, dict[int, Any]]:
    upstream = f"http://127.0.0.1:{nginx_port}/{body}/v1"
    out: dict[str, dict[int, dict[str, Any]]] = {}
    out["direct"] = measure(upstream + "/chat/completions", "direct", args)

    with passthrough_serve(tmp, upstream, args.server_cpu, log_name=f"passthrough-{body}") as (url, pid):
        out["passthrough"] = measure(url, "passthrough", args, pid)

    config = write_gateway_files(tmp, upstream, body=body)
    with cascade_serve(tmp, config, args.server_cpu, log_name=f"gateway-{body}") as (base, pid):
        check_paths(base)
        for target in args.targets:
            out[target] = measure(base + "/v1/chat/completions", target, args, pid)
        for api in args.endpoints:
            check_endpoint(base, api)
            out[f"accept_{api}"] = measure(base + ENDPOINTS[api][0], f"accept_{api}", args, pid)
    if args.redis:
        out["accept_keyed"] = measure_keyed(args, tmp, upstream, body)
    if args.learning is not None:
        out["accept_learning"], out["learning_counters"] = measure_learning(args, tmp, upstream, body)
    return out


def measure_learning(
    args: argparse.Namespace, tmp: Path, upstream: str, body: str
) -> tuple[dict[int, Any], dict[str, float]]:
    """The accept path on a gateway that samples ``--learning`` of its requests; and its counters."""
    config = write_gateway_files(tmp, upstream, body=body, learning_rate=args.learning)
    with cascade_serve(tmp, config, args.server_cpu, log_name=f"gateway-{body}-learning") as (base, pid):
        check_paths(base)
        results = measure(base + "/v1/chat/completions", "accept_learning", args, pid)
        time.sleep(6)  # the writer flushes every 5 s: let the last samples land before counting
        counters = learning_counters(base)
    shown = ", ".join(f"{k} {v:g}" for k, v in counters.items())
    print(f"  learning at {args.learning}: {shown}", flush=True)
    sampled = sum(v for k, v in counters.items() if k.startswith("cascade_learning_sampled_total"))
    dropped = sum(v for k, v in counters.items() if k.startswith("cascade_learning_dropped_total"))
    if sampled and not dropped and not counters.get("cascade_learning_rows_written_total"):
        raise RuntimeError(f"accept_learning sampled requests but wrote no traffic row: {counters}")
    return results, counters


def learning_counters(base: str) -> dict[str, float]:
    """The sampler's counters from /metrics (sampled, dropped by reason, rows written, shadow calls)."""
    from prometheus_client.parser import text_string_to_metric_families

    counters: dict[str, float] = {}
    text = httpx.get(base + "/metrics", timeout=10).text
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            if not sample.name.startswith(("cascade_learning_", "cascade_shadow_calls_total")):
                continue
            if sample.name.endswith("_created"):
                continue
            key = sample.name + "".join(f"{{{v}}}" for k, v in sorted(sample.labels.items()))
            counters[key] = counters.get(key, 0.0) + sample.value
    return counters


@contextlib.contextmanager
def redis_for(args: argparse.Namespace, tmp: Path) -> Iterator[str]:
    """The Redis URL to use: ``--redis``, or with ``auto`` a private redis-server on the client CPU."""
    if args.redis != "auto":
        yield args.redis
        return
    port = free_port()
    cmd = [
        "taskset",
        "-c",
        args.client_cpu,
        "redis-server",
        "--port",
        str(port),
        "--bind",
        "127.0.0.1",
        "--save",
        "",
        "--appendonly",
        "no",
    ]
    with process(cmd, log=tmp / "redis.log"):
        end = time.monotonic() + 10
        while True:
            try:
                with socket.create_connection(("127.0.0.1", port), timeout=1):
                    break
            except OSError:
                if time.monotonic() > end:
                    raise
                time.sleep(0.05)
        yield f"redis://127.0.0.1:{port}/0"


@contextlib.contextmanager
def keyed_gateway(
    tmp: Path, upstream: str, redis_url: str, cpu: str, body: str
) -> Iterator[tuple[str, int, str]]:
    """``cascade serve`` with Redis and one client key with a spend limit; yields (base, pid, api key).

    Uses a private key prefix (never the contract keys of a real deployment) and deletes its keys.
    """
    import uuid

    import redis

    sys.path.insert(0, str(REPO))
    from gateway.commands.keys import add_key
    from gateway.redis.keys import RedisKeys

    keys = RedisKeys(f"cascade-bench-{uuid.uuid4().hex[:8]}")
    client = redis.Redis.from_url(redis_url, decode_responses=True)
    try:
        api_key, _ = add_key(client, "bench", 1e9, keys)
        config = write_gateway_files(tmp, upstream, redis_url=redis_url, body=body)
        env = {"CASCADE_REDIS_PREFIX": keys.prefix}
        with cascade_serve(tmp, config, cpu, env, log_name=f"gateway-{body}-redis") as (base, pid):
            refused = httpx.post(base + "/v1/chat/completions", json=body_for("accept"), timeout=10)
            assert refused.status_code == 401, "the keyed gateway must require the key"
            accepted = httpx.post(
                base + "/v1/chat/completions",
                json=body_for("accept"),
                timeout=10,
                headers={"authorization": f"Bearer {api_key}"},
            )
            accepted.raise_for_status()
            assert accepted.headers["x-cascade-escalated"] == "false", accepted.headers
            counters = [  # {prefix}:spend:{key_id}:{window}, not the pending hashes or markers beside it
                name
                for name in client.scan_iter(match=f"{keys.prefix}:spend:*")
                if re.fullmatch(rf"{re.escape(keys.prefix)}:spend:[0-9a-f]+:[0-9]+", name)
            ]
            assert counters and int(client.get(counters[0]) or 0) > 0, "spend must be reserved and settled"
            yield base, pid, api_key
    finally:
        doomed = list(client.scan_iter(match=f"{keys.prefix}:*"))
        if doomed:
            client.delete(*doomed)
        client.close()


def measure_keyed(args: argparse.Namespace, tmp: Path, upstream: str, body: str) -> Any:
    """The accept path with Redis: a Redis-stored client key with a spend limit (reserve + settle)."""
    with (
        redis_for(args, tmp) as redis_url,
        keyed_gateway(tmp, upstream, redis_url, args.server_cpu, body) as (base, pid, api_key),
    ):
        return measure(base + "/v1/chat/completions", "accept_keyed", args, pid, api_key)


def summarize(rounds: list[dict[str, Any]], connections: list[int]) -> dict[str, Any]:
    """Per body: median over rounds of rps/p50/p99/CPU per target and concurrency, and ratios."""
    return {body: _summarize_body([r[body] for r in rounds], connections) for body in rounds[0]}


def _summarize_body(rounds: list[dict[str, Any]], connections: list[int]) -> dict[str, Any]:
    summary: dict[str, Any] = {}
    targets = [t for t in TARGETS if t in rounds[0]]
    for target in targets:
        summary[target] = {}
        for c in connections:
            runs = [r[target][c] for r in rounds]
            summary[target][c] = {
                "rps": statistics.median(x["rps"] for x in runs),
                "p50_ms": statistics.median(x["p50_us"] for x in runs) / 1000,
                "p99_ms": statistics.median(x["p99_us"] for x in runs) / 1000,
            }
            if target != "direct":
                cpu = statistics.median(x["server_cpu_us_per_req"] for x in runs)
                summary[target][c]["cpu_us_per_req"] = cpu
    for target in targets[1:]:
        for c in connections:
            row = summary[target][c]
            row["added_p50_ms"] = row["p50_ms"] - summary["direct"][c]["p50_ms"]
            row["added_p99_ms"] = row["p99_ms"] - summary["direct"][c]["p99_ms"]
            row["rps_vs_passthrough"] = row["rps"] / summary["passthrough"][c]["rps"]
            row["cpu_vs_passthrough"] = row["cpu_us_per_req"] / summary["passthrough"][c]["cpu_us_per_req"]
            if target.removeprefix("accept_") in ENDPOINTS and "accept" in summary:
                row["rps_vs_chat_accept"] = row["rps"] / summary["accept"][c]["rps"]
                row["added_p50_ms_vs_chat_accept"] = row["p50_ms"] - summary["accept"][c]["p50_ms"]
    return summary


def markdown(summary: dict[str, Any], connections: list[int]) -> str:
    """One full table per body."""
    lines = []
    for body, targets in summary.items():
        lines += [
            f"body {body} ({BODIES[body][0].name}, {BODIES[body][0].stat().st_size} bytes)",
            "",
            "| path | clients | req/s | p50 ms | p99 ms | added p50 ms | added p99 ms | req/s vs floor "
            "| server CPU us/req | CPU vs floor |",
            "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|",
        ]
        for target, rows in targets.items():
            for c in connections:
                row = rows[c]
                extra = (
                    "| | | | | |"
                    if target == "direct"
                    else f"| {row['added_p50_ms']:.3f} | {row['added_p99_ms']:.3f} "
                    f"| {row['rps_vs_passthrough']:.2f} "
                    f"| {row['cpu_us_per_req']:.0f} | {row['cpu_vs_passthrough']:.2f} |"
                )
                lines.append(
                    f"| {target} | {c} | {row['rps']:.0f} | {row['p50_ms']:.3f} | {row['p99_ms']:.3f} {extra}"
                )
        lines.append("")
    return "\n".join(lines)


# The targets of the request path at the highest concurrency: (req/s vs floor >=, CPU vs floor <=).
GOALS = {"accept": (0.85, 1.25), "accept_keyed": (0.70, None), "escalate": (0.47, None)}
# A translated API's accept path against chat's, in the same run (req/s at the highest concurrency).
TRANSLATION_GOAL = 0.9


def verdicts(summary: dict[str, Any], connections: list[int]) -> str:
    """The targets at the highest concurrency, per body."""
    high = max(connections)
    lines = []
    for body, targets in summary.items():
        for target, (rps_goal, cpu_goal) in GOALS.items():
            if target not in targets:
                continue
            row = targets[target][high]
            text = (
                f"{body} {target:<12} c={high}: req/s {row['rps_vs_passthrough']:.2f} of the floor "
                f"(target >= {rps_goal})"
            )
            if cpu_goal is not None:
                text += f", CPU {row['cpu_vs_passthrough']:.2f}x the floor's (target <= {cpu_goal})"
            lines.append(text)
        for target, rows in targets.items():
            if "rps_vs_chat_accept" not in rows[high]:
                continue
            low = min(connections)
            lines.append(
                f"{body} {target}: req/s {rows[high]['rps_vs_chat_accept']:.2f}x chat accept's at c={high} "
                f"(target >= {TRANSLATION_GOAL}), p50 {rows[low]['added_p50_ms_vs_chat_accept']:+.3f} ms "
                f"vs chat accept at c={low}"
            )
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--duration", type=int, default=10, help="seconds per measurement")
    parser.add_argument("--warmup", type=int, default=2, help="seconds of discarded warm-up per measurement")
    parser.add_argument("--connections", type=int, nargs="+", default=[1, 16, 64])
    parser.add_argument(
        "--bodies",
        nargs="+",
        choices=list(BODIES),
        default=list(BODIES),
        help="upstream bodies to measure with (2k: 8 tokens x top-5, 25k: 8 tokens x top-15)",
    )
    parser.add_argument("--rounds", type=int, default=1, help="repeat the whole matrix; medians reported")
    parser.add_argument("--server-cpu", default="1", help="CPU the server under test is pinned to")
    parser.add_argument("--client-cpu", default="0", help="CPU nginx, wrk and a private Redis are pinned to")
    parser.add_argument("--out", type=Path, help="write all raw results and the summary as JSON")
    parser.add_argument(
        "--targets",
        nargs="+",
        choices=list(GATEWAY_TARGETS),
        default=list(GATEWAY_TARGETS),
        help="gateway paths to measure (direct and passthrough, the references, always run)",
    )
    parser.add_argument(
        "--endpoints",
        nargs="+",
        choices=list(ENDPOINTS),
        default=[],
        help="also measure the accept path through these translated APIs, against chat's accept",
    )
    parser.add_argument(
        "--learning",
        type=float,
        metavar="RATE",
        help="also measure accept on a gateway sampling RATE (e.g. 0.01) of its requests into a "
        "JSONL traffic store, to compare with accept without learning",
    )
    parser.add_argument(
        "--redis",
        help="also measure accept with a Redis-stored key and spend limit: a Redis URL, or 'auto' to "
        "start a private redis-server pinned to the client CPU",
    )
    args = parser.parse_args()
    for tool in ("nginx", "wrk", "taskset"):
        if shutil.which(tool) is None and not Path("/usr/sbin/" + tool).exists():
            sys.exit(f"{tool} not found: apt-get install nginx wrk")

    load_before = os.getloadavg()
    with tempfile.TemporaryDirectory(prefix="cascade-bench-") as name:
        tmp = Path(name)
        with nginx_upstream(tmp, args.client_cpu) as nginx_port:
            rounds = []
            for index in range(args.rounds):
                print(f"round {index + 1}/{args.rounds}", flush=True)
                rounds.append(one_round(args, tmp, nginx_port))
    load_after = os.getloadavg()
    summary = summarize(rounds, args.connections)
    print()
    print(markdown(summary, args.connections))
    print(verdicts(summary, args.connections))
    print(f"\nload average (1, 5, 15 min) before: {load_before}, after: {load_after}")
    if args.out:
        args.out.write_text(
            json.dumps(
                {
                    "args": {k: str(v) for k, v in vars(args).items()},
                    "load_before": load_before,
                    "load_after": load_after,
                    "rounds": rounds,
                    "summary": summary,
                },
                indent=2,
            )
        )


if __name__ == "__main__":
    main()
