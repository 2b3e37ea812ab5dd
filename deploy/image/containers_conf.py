"""Add the podman settings a build host needs to containers.conf, keeping every setting already there.

    python3 deploy/image/containers_conf.py [/etc/containers/containers.conf]

Three settings, each added only when the host needs it and the file does not set it already:

* ``[containers] default_ulimits``: podman running as root gives containers 1,048,576 open files
  (and as many processes as the host allows). Where the host's hard limit is lower (20,000 on the
  VMs this was measured on), every container fails with "crun/runc: setrlimit `RLIMIT_NOFILE`:
  Operation not permitted". The limits written are the host's own: its hard open-files limit and
  at most ``kernel.pid_max`` processes (32,768 there; above it fails the same way).
* ``[engine] runtime = "runc"``: crun 1.8 (Debian bookworm) refuses hosts with hybrid cgroups
  (v1 controllers plus a v2 hierarchy: "cgroups in hybrid mode not supported"); runc works on
  hybrid, v1 and v2 hosts alike, so it is written whatever the host.
* ``[engine] cgroup_manager = "cgroupfs"`` and ``events_logger = "file"``: the defaults (systemd,
  journald) need a running systemd, which containers and small VMs often lack.

Prints one line per setting added; writes nothing if nothing is missing.
"""

from __future__ import annotations

import argparse
import re
import resource
import sys
import tomllib
from dataclasses import dataclass
from pathlib import Path

DEFAULT_PATH = Path("/etc/containers/containers.conf")
PODMAN_ROOT_NOFILE = 1_048_576


@dataclass(frozen=True)
class HostFacts:
    """What decides the settings: the host's hard limits and whether systemd runs."""

    nofile_hard: int
    nproc_hard: int
    pid_max: int
    systemd_running: bool

    @classmethod
    def of_this_host(cls) -> HostFacts:
        """Read the facts of the machine this runs on."""
        pid_max_file = Path("/proc/sys/kernel/pid_max")
        return cls(
            nofile_hard=_hard_limit(resource.RLIMIT_NOFILE),
            nproc_hard=_hard_limit(resource.RLIMIT_NPROC),
            pid_max=int(pid_max_file.read_text()) if pid_max_file.exists() else 4_194_304,
            # sd_booted(3): systemd is the init system iff this directory exists.
            systemd_running=Path("/run/systemd/system").is_dir(),
        )


@dataclass(frozen=True)
class Setting:
    """One ``key = value`` line of a TOML table, with the comment that says why."""

    table: str
    key: str
    value: str
    why: str


def _hard_limit(which: int) -> int:
    hard = resource.getrlimit(which)[1]
    return sys.maxsize if hard == resource.RLIM_INFINITY else hard


def needed_settings(host: HostFacts) -> list[Setting]:
    """The settings this host needs (before looking at what the file already sets)."""
    settings = []
    if host.nofile_hard < PODMAN_ROOT_NOFILE:
        nofile = host.nofile_hard
        nproc = min(host.nproc_hard, host.pid_max)
        settings.append(
            Setting(
                "containers",
                "default_ulimits",
                f'["nofile={nofile}:{nofile}", "nproc={nproc}:{nproc}"]',
                f"podman as root asks for nofile={PODMAN_ROOT_NOFILE}, above this host's hard limit "
                f"({nofile}): containers would fail with 'setrlimit RLIMIT_NOFILE: Operation not permitted'",
            )
        )
    settings.append(
        Setting(
            "engine",
            "runtime",
            '"runc"',
            "crun 1.8 refuses hybrid cgroup v1+v2 hosts ('cgroups in hybrid mode not supported'); runc works",
        )
    )
    if not host.systemd_running:
        settings.append(Setting("engine", "cgroup_manager", '"cgroupfs"', "no systemd on this host"))
        settings.append(Setting("engine", "events_logger", '"file"', "no systemd (journald) on this host"))
    return settings


def add_missing(text: str, settings: list[Setting]) -> tuple[str, list[Setting]]:
    """``text`` with every setting it does not set yet added to its table; and those added."""
    document = tomllib.loads(text)
    added = []
    for setting in settings:
        if setting.key in document.get(setting.table, {}):
            continue
        line = f"# {setting.why}\n{setting.key} = {setting.value}\n"
        header = re.search(rf"^[ \t]*\[{re.escape(setting.table)}\][ \t]*(#.*)?$\n?", text, re.MULTILINE)
        if header:
            text = text[: header.end()] + line + text[header.end() :]
        else:
            separator = "" if not text else ("\n" if text.endswith("\n") else "\n\n")
            text = f"{text}{separator}[{setting.table}]\n{line}"
        document = tomllib.loads(text)  # the result must stay valid TOML
        added.append(setting)
    return text, added


def main() -> None:
    """Update the file in place (created if absent)."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("path", nargs="?", type=Path, default=DEFAULT_PATH)
    path = parser.parse_args().path
    text = path.read_text() if path.exists() else ""
    new_text, added = add_missing(text, needed_settings(HostFacts.of_this_host()))
    if added:
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(new_text)
    for setting in added:
        print(f"{path}: [{setting.table}] {setting.key} = {setting.value}  ({setting.why})")


if __name__ == "__main__":
    main()
