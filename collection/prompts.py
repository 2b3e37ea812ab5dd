"""Labelled prompt sets: JSONL, one question per line.

Fields: ``query_id`` (unique), ``prompt`` (the user message), ``answer`` (the label), ``grader``
(see ``graders``); optional ``system``, ``aliases`` (list), ``dataset``, ``subject``,
``max_tokens`` (overrides the run's default for this question).

A question may instead give the whole conversation as ``messages`` (chat messages, ``prompt`` then
optional), and carry the chat fields a client would send with it: ``tools`` (OpenAI tools),
``tool_choice`` and ``response_format``; they are sent as they are (``Prompt.request_fields``).
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

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
    conversation: tuple[dict[str, Any], ...] = ()
    tools: tuple[dict[str, Any], ...] = ()
    tool_choice: Any = None
    response_format: dict[str, Any] | None = None

    def messages(self) -> list[dict[str, Any]]:
        """The chat messages sent to a model."""
        if self.conversation:
            return [dict(message) for message in self.conversation]
        messages = [{"role": "system", "content": self.system}] if self.system else []
        return [*messages, {"role": "user", "content": self.prompt}]

    def request_fields(self) -> dict[str, Any]:
        """The chat fields besides the messages a client sends with this question (tools, formats)."""
        fields: dict[str, Any] = {}
        if self.tools:
            fields["tools"] = [dict(tool) for tool in self.tools]
        if self.tool_choice is not None:
            fields["tool_choice"] = self.tool_choice
        if self.response_format is not None:
            fields["response_format"] = self.response_format
        return fields


_REQUIRED = ("query_id", "answer", "grader")
_CHAT = ("messages", "tools", "tool_choice", "response_format")
_KNOWN = {*_REQUIRED, "prompt", "system", "aliases", "dataset", "subject", "max_tokens", *_CHAT}


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
        required = _REQUIRED if record.get("messages") else ("prompt", *_REQUIRED)
        missing = [key for key in required if not record.get(key) and record.get(key) != 0]
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
        problem = _chat_problem(record)
        if problem:
            raise PromptSetError(f"{path}:{number}: {problem}")
        conversation = tuple(record.get("messages") or ())
        prompts.append(
            Prompt(
                query_id=query_id,
                prompt=str(record.get("prompt") or _last_user_text(conversation)),
                answer=str(record["answer"]),
                grader=record["grader"],
                system=record.get("system"),
                aliases=tuple(str(a) for a in record.get("aliases") or ()),
                dataset=record.get("dataset"),
                subject=record.get("subject"),
                max_tokens=record.get("max_tokens"),
                extra={k: str(v) for k, v in record.items() if k not in _KNOWN},
                conversation=conversation,
                tools=tuple(record.get("tools") or ()),
                tool_choice=record.get("tool_choice"),
                response_format=record.get("response_format"),
            )
        )
        if limit is not None and len(prompts) >= limit:
            break
    if not prompts:
        raise PromptSetError(f"{path}: no questions")
    return prompts


def _chat_problem(record: dict[str, Any]) -> str | None:
    """Why the question's chat fields cannot be sent, or None."""
    messages = record.get("messages")
    if messages is not None and (
        not isinstance(messages, list)
        or not messages
        or not all(isinstance(m, dict) and isinstance(m.get("role"), str) for m in messages)
    ):
        return "messages must be a non-empty list of chat messages with a role"
    tools = record.get("tools")
    if tools is not None and (not isinstance(tools, list) or not all(isinstance(t, dict) for t in tools)):
        return "tools must be a list of OpenAI tool objects"
    response_format = record.get("response_format")
    if response_format is not None and not isinstance(response_format, dict):
        return "response_format must be an object"
    return None


def _last_user_text(conversation: tuple[dict[str, Any], ...]) -> str:
    """The text of the conversation's last user message (what ``prompt`` means for a conversation)."""
    for message in reversed(conversation):
        if message.get("role") == "user" and isinstance(message.get("content"), str):
            return str(message["content"])
    return ""
