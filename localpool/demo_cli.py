"""``cascade demo``: the local pool + the gateway with the calibrated demo policy, no keys, no Redis."""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any

import typer

from cli_failure import fail

if TYPE_CHECKING:
    from localpool.manifest import Manifest
    from localpool.paths import PoolPaths

DEFAULT_POLICY = Path("policies/local-demo-served.json")  # localpool.demo_policy: text + tool calls
# What the default policy covers (gateway.config.coverage): text requests whose last user message holds two
# numbers or more (every calibration question does; tests/localpool/test_demo_policy.py), and tool
# calls. Everything else (greetings, questions in words, structured output) goes to the chat member:
# the 1.5B model as it comes, no system message, answering directly (tier `uncalibrated`).
DEMO_COVERAGE: dict[str, Any] = {"min_numbers": 2, "otherwise": "qwen1.5b-chat"}
# The demo policy was calibrated on short arithmetic questions sent as they are (the pool members'
# request defaults add how to answer): ask one such. A one-step question the fast member answers
# confidently, and a multi-step one it is unsure of, which the cascade escalates.
QUICK_QUESTION = "Ana has 23 apples and finds 19 more. How many apples does Ana have?"
MULTI_STEP_QUESTION = (
    "Ben buys 7 notebooks at 13 dollars each and pays with 100 dollars. "
    "How many dollars of change does Ben get?"
)
SMOKE_MESSAGES = [{"role": "user", "content": QUICK_QUESTION}]


def cascade_command() -> str:
    """How to invoke ``cascade`` from the user's shell: bare if it is on PATH, else its path.

    ``cascade demo`` usually runs from a virtualenv that is not activated, where a bare ``cascade``
    would not be found; the script next to this interpreter is printed instead (relative to the
    current directory when it is below it, e.g. ``.venv/bin/cascade``).
    """
    import os
    import shutil

    script = Path(sys.executable).parent / "cascade"
    on_path = shutil.which("cascade")
    if on_path and Path(on_path).resolve() == script.resolve():
        return "cascade"
    if not script.exists():
        return "cascade"
    try:
        return os.path.relpath(script) if script.resolve().is_relative_to(Path.cwd()) else str(script)
    except ValueError:
        return str(script)


def heldout_path(policy: Path) -> Path:
    """The held-out table written beside a policy (``local-demo.json`` -> ``local-demo-heldout.json``)."""
    return policy.with_name(f"{policy.stem}-heldout.json")


def heldout_text(table: dict[str, Any]) -> str:
    """The held-out table (``localpool.heldout_table`` JSON) as banner lines: tiers vs best single."""
    best = table["best_single"]
    lines = [
        f"Held out ({table['splits']} random halves of {table['n_queries']} questions; routes chosen on "
        "the other half):",
        f"  {'':<34}{'quality':>8}{'cost/question':>15}{'vs best: quality, cost':>26}",
    ]

    def row(label: str, quality: float, cost: float) -> str:
        share = f"{quality / best['quality']:.0%}, {cost / best['cost_usd']:.0%}"
        return f"  {label:<34}{quality:>8.3f}{'$' + format(cost, '.3g'):>15}{share:>26}"

    lines.append(row(f"best single: {best['model']}", best["quality"], best["cost_usd"]))
    for entry in table["tiers"]:
        if entry["method"] == "envelope":
            label = f"cascade/{entry['tier']} (<= ${entry['budget_usd']:.3g})"
            lines.append(row(label, entry["quality"], entry["cost_usd"]))
    return "\n".join(lines)


def usage_text(
    url: str, tiers: list[str], heldout: dict[str, Any] | None = None, *, covered: bool = False
) -> str:
    """How to call the running demo gateway (curl and the openai SDK), and what to expect of it.

    ``covered``: the gateway has the demo's ``coverage`` (``DEMO_COVERAGE``): say what goes where.
    """
    table = f"\n{heldout_text(heldout)}\n" if heldout else ""
    tier = "balanced" if "balanced" in tiers else (tiers[0] if tiers else "balanced")
    if covered:
        scope = f"""What it serves, by request (the x-cascade-tier header says which):
  * arithmetic questions (text whose last user message holds two numbers or more): the calibrated
    cascade above, a fast member escalating to a step-by-step one when unsure or cut off;
  * requests with tools: the tool-call cascade calibrated on BFCL questions (docs/bfcl.md),
    calls returned as real tool_calls;
  * anything else (greetings, questions in words, structured output): {DEMO_COVERAGE["otherwise"]},
    the 1.5B model with no system message, directly: uncalibrated (tier `uncalibrated`).
The calibrated thresholds mean most for prompts like the ones they were calibrated on
(docs/local-models.md)."""
    else:
        scope = """The policy serves every request as it is: its thresholds mean most for prompts like the
ones it was calibrated on (docs/local-models.md)."""
    return f"""
The cascade gateway is serving at {url}/v1 (tiers: {", ".join(tiers)}).
{table}
  curl -s {url}/v1/chat/completions -H 'Content-Type: application/json' -D - \\
    -d '{{"model": "cascade", "temperature": 0, "messages": [
         {{"role": "user", "content": "{QUICK_QUESTION}"}}]}}'

  from openai import OpenAI
  client = OpenAI(base_url="{url}/v1", api_key="unused")
  raw = client.chat.completions.with_raw_response.create(
      model="cascade/{tier}", temperature=0,
      messages=[{{"role": "user", "content": "{MULTI_STEP_QUESTION}"}}])
  print(raw.headers["x-cascade-models-called"], raw.headers["x-cascade-cost-usd"])
  print(raw.parse().choices[0].message.content)

{scope}
Metrics: {url}/metrics    Pool: {cascade_command()} models status    Stop: Ctrl-C
"""


# The command's options, one alias each (its signature stays one line per option).
_HostOption = Annotated[str, typer.Option(help="interface the gateway listens on")]
_PortOption = Annotated[int, typer.Option(help="gateway port")]
_PolicyOption = Annotated[Path, typer.Option(help="policy file (models must be in the pool)")]
_SmokeOption = Annotated[
    bool, typer.Option("--smoke", help="send one request, print the cascade headers, shut down")
]
_TimeoutOption = Annotated[float, typer.Option(help="seconds to wait for each server")]
_PricesOption = Annotated[
    Path | None,
    typer.Option(help="price sheet the policy was calibrated with: its prices replace the pool's"),
]
_ContextOption = Annotated[
    int | None,
    typer.Option(min=256, help="context tokens of every server (default: each model's, models.yaml)"),
]


def demo(
    host: _HostOption = "127.0.0.1",
    port: _PortOption = 8080,
    policy: _PolicyOption = DEFAULT_POLICY,
    smoke: _SmokeOption = False,
    timeout: _TimeoutOption = 180.0,
    context: _ContextOption = None,
    prices: _PricesOption = None,
) -> None:
    """Start the local pool and the gateway (policies/local-demo-served.json); Ctrl-C stops everything.

    The default policy serves arithmetic text and tool calls through calibrated cascades and every
    other request through the chat member directly (``DEMO_COVERAGE``); a policy given with
    ``--policy`` serves every request as it is. Prints the policy's held-out table
    (``<policy>-heldout.json`` beside it, when present).
    """
    from localpool import pool
    from localpool.demo_config import pool_gateway_config, write_gateway_config
    from localpool.errors import InstallError
    from localpool.paths import PoolPaths
    from localpool.process import ProcessError, read_record

    coverage = DEMO_COVERAGE if policy == DEFAULT_POLICY else None
    policy, names, tiers, heldout = read_policy(policy)
    names = served_models(names, coverage)
    paths = PoolPaths.default()
    manifest, servers = _load_servers(policy, names)
    already_running = {n for n in servers if read_record(paths.pid_file(n)) is not None}
    gateway: subprocess.Popen[bytes] | None = None
    interrupted = False
    signal.signal(signal.SIGTERM, _interrupt)
    try:
        _install_missing(manifest, paths, servers)
        options = pool.ServerOptions.from_env(servers=len(servers), context=context)
        pool.up(manifest, paths, servers, options, timeout_s=timeout, say=_say)
        config = write_gateway_config(
            paths.run / "demo-gateway.yaml",
            pool_gateway_config(manifest, names, policy.resolve(), coverage=coverage, prices=prices),
        )
        gateway = _start_gateway(config, host, port, log_path := paths.run / "gateway.log")
        url = f"http://127.0.0.1:{port}"
        _wait_gateway_ready(gateway, url, config, log_path)
        usage = usage_text(_shown_url(host, port), tiers, heldout, covered=coverage is not None)
        if smoke:
            _smoke(url)
        else:
            _serve_until_exit(gateway, log_path, usage)
    except KeyboardInterrupt:
        interrupted = True
    except (ProcessError, InstallError) as exc:
        fail(str(exc))
    finally:
        if gateway is not None:
            _stop_gateway(gateway)
        started = [n for n in servers if n not in already_running]
        pool.down(manifest, paths, started, say=_say)
    if interrupted:
        _say("demo stopped")


def _shown_url(host: str, port: int) -> str:
    """The address the usage text shows: the bound host, or loopback for a wildcard bind."""
    return f"http://{host if host != '0.0.0.0' else '127.0.0.1'}:{port}"


def _serve_until_exit(gateway: subprocess.Popen[bytes], log_path: Path, usage: str) -> None:
    """Print the usage text and wait for the gateway; its exit (not a Ctrl-C) is a failure."""
    typer.echo(usage)
    while gateway.poll() is None:
        time.sleep(0.5)
    fail(f"the gateway exited (code {gateway.returncode}); see {log_path}")


def _say(message: str) -> None:
    """A progress line on stderr (stdout carries the usage text and the smoke request's headers)."""
    typer.echo(message, err=True)


def served_models(policy_models: list[str], coverage: dict[str, Any] | None) -> list[str]:
    """The models the demo's gateway config names: the policy's, and the coverage's ``otherwise``."""
    if coverage is None or coverage["otherwise"] in policy_models:
        return list(policy_models)
    return [*policy_models, coverage["otherwise"]]


def read_policy(policy: Path) -> tuple[Path, list[str], list[str], dict[str, Any] | None]:
    """The policy file to serve, its model names (kind sections' included), its tier names and its
    held-out table (or None; the default policy shows the table of its text policy).

    The default policy is read from the installed package when run outside a checkout.
    """
    if policy == DEFAULT_POLICY and not policy.is_file():  # outside a checkout: the installed copy
        from importlib.resources import files

        policy = Path(str(files("policies").joinpath(DEFAULT_POLICY.name)))
    try:
        document = json.loads(policy.read_text(encoding="utf-8"))
        names = list(document["models"])
        for section in (document.get("kinds") or {}).values():
            names += [name for name in section["models"] if name not in names]
        tiers = list(document["tiers"])
        table_file = heldout_path(policy)
        if not table_file.is_file() and policy.name == DEFAULT_POLICY.name:  # the text policy's table
            table_file = heldout_path(policy.with_name("local-demo.json"))
        heldout = json.loads(table_file.read_text(encoding="utf-8")) if table_file.is_file() else None
    except (OSError, ValueError, KeyError) as exc:
        fail(f"cannot read the policy {policy}: {exc}")
    return policy, names, tiers, heldout


def _load_servers(policy: Path, names: list[str]) -> tuple[Manifest, list[str]]:
    """The pool's manifest and the servers the policy's models need (members share their model's)."""
    from localpool.manifest import ManifestError, load_manifest

    try:
        manifest = load_manifest()
        return manifest, manifest.servers_for(names)
    except ManifestError as exc:
        fail(f"{policy}: {exc}")


def _interrupt(signum: int, _frame: object) -> None:
    """SIGTERM handler: stop the demo as Ctrl-C does (gateway and started servers shut down)."""
    raise KeyboardInterrupt


def _install_missing(manifest: Manifest, paths: PoolPaths, servers: list[str]) -> None:
    """Install the model files of the servers not installed yet (e.g. the optional larger model)."""
    from localpool.install import install_model, model_is_installed
    from localpool.manifest import DEFAULT_MANIFEST

    for name in servers:  # e.g. the optional larger model the calibrated policy escalates to
        if not model_is_installed(manifest.models[name], paths):
            install_model(name, manifest.models[name], paths, _say, manifest_path=DEFAULT_MANIFEST)


def _start_gateway(config: Path, host: str, port: int, log_path: Path) -> subprocess.Popen[bytes]:
    """``cascade serve --config config`` in a child process logging to ``log_path``."""
    from localpool.process import adopt

    log_path.parent.mkdir(parents=True, exist_ok=True)
    command = [
        sys.executable,
        "-m",
        "cascade_cli.main",
        "serve",
        "--config",
        str(config),
        "--host",
        host,
        "--port",
        str(port),
    ]
    with log_path.open("ab") as log:
        gateway = subprocess.Popen(command, stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT)
    adopt(gateway)  # so that a gateway dying at start says how
    return gateway


def _wait_gateway_ready(gateway: subprocess.Popen[bytes], url: str, config: Path, log_path: Path) -> None:
    """Wait for the gateway's /readyz (ProcessError if it dies or is not ready within 60 s)."""
    from localpool.process import wait_healthy

    wait_healthy(f"{url}/readyz", pid=gateway.pid, log_path=log_path, timeout_s=60, name="gateway")
    _say(f"gateway: ready (pid {gateway.pid}, config {config}, log {log_path})")


def _stop_gateway(gateway: subprocess.Popen[bytes]) -> None:
    """Terminate the gateway if it still runs (killed after 10 s)."""
    if gateway.poll() is not None:
        return
    gateway.terminate()
    try:
        gateway.wait(timeout=10)
    except subprocess.TimeoutExpired:
        gateway.kill()
        gateway.wait()
    _say("gateway: stopped")


def _smoke(url: str) -> None:
    """One cascade request; prints the answer and the x-cascade-* headers."""
    import httpx

    body = {"model": "cascade", "temperature": 0, "messages": SMOKE_MESSAGES}
    response = httpx.post(f"{url}/v1/chat/completions", json=body, timeout=120)
    response.raise_for_status()
    for key, value in sorted(response.headers.items()):
        if key.startswith("x-cascade-"):
            typer.echo(f"{key}: {value}")
    typer.echo(f"answer: {response.json()['choices'][0]['message']['content']!r}")
