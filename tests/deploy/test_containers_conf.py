"""deploy/image/containers_conf.py adds only the podman settings a host needs and the file lacks."""

from __future__ import annotations

import importlib.util
import subprocess
import sys
import tomllib
from pathlib import Path

from deploy_support import DEPLOY

SCRIPT = DEPLOY / "image" / "containers_conf.py"
_spec = importlib.util.spec_from_file_location("containers_conf", SCRIPT)
assert _spec and _spec.loader
containers_conf = importlib.util.module_from_spec(_spec)
sys.modules["containers_conf"] = containers_conf  # dataclasses look their module up by name
_spec.loader.exec_module(containers_conf)

LOW_LIMITS_NO_SYSTEMD = containers_conf.HostFacts(
    nofile_hard=20000, nproc_hard=96364, pid_max=32768, systemd_running=False
)
ROOMY_WITH_SYSTEMD = containers_conf.HostFacts(
    nofile_hard=1_048_576, nproc_hard=4_000_000, pid_max=4_194_304, systemd_running=True
)


def test_a_host_like_the_measured_one_needs_all_three_settings() -> None:
    text, added = containers_conf.add_missing("", containers_conf.needed_settings(LOW_LIMITS_NO_SYSTEMD))
    document = tomllib.loads(text)
    assert document["containers"]["default_ulimits"] == ["nofile=20000:20000", "nproc=32768:32768"]
    assert document["engine"] == {"runtime": "runc", "cgroup_manager": "cgroupfs", "events_logger": "file"}
    assert len(added) == 4
    assert text.count("# ") == 4  # each line says why


def test_a_host_with_systemd_and_high_limits_only_gets_runc() -> None:
    text, _ = containers_conf.add_missing("", containers_conf.needed_settings(ROOMY_WITH_SYSTEMD))
    assert tomllib.loads(text) == {"engine": {"runtime": "runc"}}


def test_settings_already_in_the_file_are_kept_and_others_go_into_its_tables() -> None:
    existing = (
        "# site settings\n"
        "[containers]\n"
        'default_ulimits = ["nofile=4096:4096"]\n'
        "log_size_max = 1000\n"
        "\n"
        "[engine] # the engine\n"
        'runtime = "crun"\n'
        "\n"
        "[network]\n"
        'network_backend = "netavark"\n'
    )
    text, added = containers_conf.add_missing(
        existing, containers_conf.needed_settings(LOW_LIMITS_NO_SYSTEMD)
    )
    document = tomllib.loads(text)
    assert document["containers"] == {"default_ulimits": ["nofile=4096:4096"], "log_size_max": 1000}
    assert document["engine"] == {"runtime": "crun", "cgroup_manager": "cgroupfs", "events_logger": "file"}
    assert document["network"] == {"network_backend": "netavark"}
    assert [s.key for s in added] == ["cgroup_manager", "events_logger"]
    assert text.startswith(existing.split("[engine]")[0])  # untouched before the first change


def test_a_second_run_changes_nothing(tmp_path: Path) -> None:
    settings = containers_conf.needed_settings(LOW_LIMITS_NO_SYSTEMD)
    once, _ = containers_conf.add_missing("", settings)
    twice, added = containers_conf.add_missing(once, settings)
    assert twice == once and added == []


def test_the_script_writes_the_file_and_reports_each_setting(tmp_path: Path) -> None:
    path = tmp_path / "containers.conf"
    first = subprocess.run(
        [sys.executable, str(SCRIPT), str(path)], capture_output=True, text=True, check=True
    )
    assert 'runtime = "runc"' in first.stdout
    written = path.read_text()
    second = subprocess.run(
        [sys.executable, str(SCRIPT), str(path)], capture_output=True, text=True, check=True
    )
    assert second.stdout == "" and path.read_text() == written
