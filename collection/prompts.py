"""Labelled prompt sets: JSONL, one question per line.

Fields: ``query_id`` (unique), ``prompt`` (the user message), ``answer`` (the label), ``grader``
(see ``graders``); optional ``system``, ``aliases`` (list), ``dataset``, ``subject``,
``max_tokens`` (overrides the run's default for this question).
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path

from graders import GRADERS


class PromptSetError(Exception):
    """The prompt set is unreadable or invalid; the message names the file and line."""


@dataclass(frozen=True)
class Prompt:
    """One labelled question."""

    query_id: str
    prompt: str
    answer: str
    grader: str
    system: str | None = None
    aliases: tuple[str, ...] = ()
    dataset: str | None = None
    subject: str | None = None
    max_tokens: int | None = None
    extra: dict[str, str] = field(default_factory=dict)

    def messages(self) -> list[dict[str, str]]:
        """The chat messages sent to a model."""
        messages = [{"role": "system", "content": self.system}] if self.system else []
        return [*messages, {"role": "user", "content": self.prompt}]


_REQUIRED = ("query_id", "prompt", "answer", "grader")
_KNOWN = {*_REQUIRED, "system", "aliases", "dataset", "subject", "max_tokens"}


def load_prompts(path: Path, limit: int | None = None) -> list[Prompt]:
    """Read a prompt set; ``limit`` keeps the first N questions."""
    try:
        lines = path.read_text(encoding="utf-8").splitlines()
    except OSError as exc:
        raise PromptSetError(f"{path}: cannot read the prompt set ({exc.strerror})") from exc
    prompts: list[Prompt] = []
    seen: set[str] = set()
    for number, line in enumerate(lines, start=1):
        if not line.strip():
            continue
        try:
            record = json.loads(line)
        except json.JSONDecodeError as exc:
            raise PromptSetError(f"{path}:{number}: not JSON ({exc.msg})") from exc
        missing = [key for key in _REQUIRED if not record.get(key) and record.get(key) != 0]
        if missing:
            raise PromptSetError(f"{path}:{number}: missing {', '.join(missing)}")
        if record["grader"] not in GRADERS:
            raise PromptSetError(
                f"{path}:{number}: unknown grader {record['grader']!r}; known: {', '.join(GRADERS)}"
            )
        query_id = str(record["query_id"])
        if query_id in seen:
            raise PromptSetError(f"{path}:{number}: duplicate query_id {query_id!r}")
        seen.add(query_id)
        prompts.append(
            Prompt(
                query_id=query_id,
                prompt=str(record["prompt"]),
                answer=str(record["answer"]),
                grader=record["grader"],
                system=record.get("system"),
                aliases=tuple(str(a) for a in record.get("aliases") or ()),
                dataset=record.get("dataset"),
                subject=record.get("subject"),
                max_tokens=record.get("max_tokens"),
                extra={k: str(v) for k, v in record.items() if k not in _KNOWN},
            )
        )
        if limit is not None and len(prompts) >= limit:
            break
    if not prompts:
        raise PromptSetError(f"{path}: no questions")
    return prompts
