"""What every generated question set must do: the same arguments write the same file."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

from collection.prompts import Prompt, load_prompts


def generated_twice_alike(main: Callable[[list[str]], None], tmp_path: Path, *args: str) -> list[Prompt]:
    """Run a generator's ``main`` twice with the same ``args`` (into two files under ``tmp_path``):
    the files are equal byte for byte; the prompts they hold, as ``cascade collect`` loads them."""
    first, second = tmp_path / "a.jsonl", tmp_path / "b.jsonl"
    main([str(first), *args])
    main([str(second), *args])
    assert first.read_bytes() == second.read_bytes()
    return load_prompts(first)
