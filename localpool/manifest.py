"""The pool manifest (``localpool/models.yaml``): pinned packages, assembled-file digests, ports, prices."""

from __future__ import annotations

from importlib.resources import files
from pathlib import Path
from typing import Literal

import yaml
from pydantic import Field, ValidationError, model_validator

from money import Price
from policies.request_defaults import RequestDefaults
from policies.schema_base import StrictModel

DEFAULT_MANIFEST = Path(str(files("localpool").joinpath("models.yaml")))


class ManifestError(Exception):
    """The manifest is missing or invalid, or names an unknown model; the message is one line."""


class Part(StrictModel):
    """One piece of a model file: a member of a pinned PyPI wheel."""

    package: str
    version: str
    member: str = Field(description="path of the piece inside the wheel")


class ModelSpec(StrictModel):
    """One GGUF model of the pool and how llama-server serves it."""

    description: str
    parameters: int = Field(gt=0, description="parameter count (model card)")
    file: str
    size_bytes: int = Field(gt=0)
    sha256: str = Field(pattern=r"^[0-9a-f]{64}$")
    parts: list[Part] = Field(min_length=1)
    port: int = Field(ge=1, le=65535)
    default: bool = True
    price: Price = Field(description="what a call is billed (local models state a price, see docs)")
    context: int = Field(
        4096,
        ge=256,
        description="tokens of context the server holds, one pool shared by its slots (--kv-unified): "
        "one request may use all of it; at most the model's trained context",
    )
    server_args: list[str] = Field(default_factory=list)
    tool_calls: Literal["native", "content"] = Field(
        "native",
        description="how the model writes function calls behind llama-server (measured; docs/tool-calls.md)",
    )
    cancel_overrun_tokens: int | None = Field(
        None,
        ge=0,
        description="tokens llama-server may still generate after a stream is closed (measured by "
        "bench/local/cancel_overrun.py); the gateway config's models.*.cancel_overrun_tokens",
    )


class ServerSpec(StrictModel):
    """The pinned llama-server package and its two builds: native (this machine) and portable (images)."""

    package: str
    version: str
    cmake_args: str = ""
    portable_cmake_args: str = Field(
        "", description="the portable build's CMake options (`cascade models install --portable`)"
    )
    portable_excluded_variants: list[str] = Field(
        default_factory=list,
        description="CPU backend variants deleted from a portable install (libggml-cpu-<name>.so)",
    )


class MemberSpec(StrictModel):
    """A pool member: one of the pool's models asked in a particular way (its request defaults).

    Members let one model appear twice in a policy, e.g. a fast member answering in a few tokens
    and a reasoning member thinking step by step; each has the model's per-token price, so their
    costs differ by the tokens they spend. ``cascade collect`` and ``cascade demo`` send exactly
    these defaults (``policies.request_defaults``).
    """

    server: str = Field(description="the pool model that serves this member")
    description: str = ""
    request_defaults: RequestDefaults


class Manifest(StrictModel):
    """The whole pool."""

    llama_server: ServerSpec
    models: dict[str, ModelSpec]
    members: dict[str, MemberSpec] = Field(default_factory=dict)

    @model_validator(mode="after")
    def _members_name_models(self) -> Manifest:
        for name, member in self.members.items():
            if name in self.models:
                raise ValueError(f"member {name!r} has the name of a model")
            if member.server not in self.models:
                raise ValueError(f"member {name!r} names unknown model {member.server!r}")
        return self

    def server_of(self, name: str) -> str:
        """The pool model serving ``name`` (a model serves itself; a member, its ``server``)."""
        if name in self.members:
            return self.members[name].server
        if name in self.models:
            return name
        known = ", ".join([*self.models, *self.members])
        raise ManifestError(f"unknown model {name}; the pool has {known}")

    def servers_for(self, names: list[str]) -> list[str]:
        """The pool models serving these models or members, in first-use order, without repeats."""
        return list(dict.fromkeys(self.server_of(n) for n in names))

    def select(self, names: list[str] | None, *, include_optional: bool = False) -> dict[str, ModelSpec]:
        """The named models (all defaults when ``names`` is empty); unknown names are an error."""
        if not names:
            return {n: m for n, m in self.models.items() if m.default or include_optional}
        unknown = [n for n in names if n not in self.models]
        if unknown:
            raise ManifestError(f"unknown model {', '.join(unknown)}; the pool has {', '.join(self.models)}")
        return {n: self.models[n] for n in names}


def load_manifest(path: Path | None = None) -> Manifest:
    """Read and validate the manifest (the packaged ``models.yaml`` by default)."""
    path = path or DEFAULT_MANIFEST
    try:
        document = yaml.safe_load(path.read_text(encoding="utf-8"))
        return Manifest.model_validate(document)
    except OSError as exc:
        raise ManifestError(f"{path}: cannot read the model manifest ({exc.strerror})") from exc
    except (yaml.YAMLError, ValidationError) as exc:
        first = str(exc).splitlines()
        raise ManifestError(f"{path}: invalid model manifest: {' '.join(first[:3])}") from exc
