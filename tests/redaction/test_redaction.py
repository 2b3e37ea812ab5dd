"""The one redaction of secrets from URLs and relayed text (redaction)."""

from __future__ import annotations

import pytest

from redaction import Redactor, redact_url, url_secrets


@pytest.mark.parametrize(
    ("url", "shown"),
    [
        ("redis://:pw@host:6379/0", "redis://:***@host:6379/0"),
        ("redis://user:pw@host/0", "redis://user:***@host/0"),
        ("postgresql://postgres@host/db", "postgresql://postgres@host/db"),
        ("redis://user:p@ss@host/0", "redis://user:***@host/0"),
        (
            "postgresql://u:p@h/db?sslmode=require&password=zz",
            "postgresql://u:***@h/db?sslmode=require&password=***",
        ),
        ("http://h/v1?api_key=abc&x=1", "http://h/v1?api_key=***&x=1"),
        ("file:///var/lib/cascade/traffic.jsonl", "file:///var/lib/cascade/traffic.jsonl"),
        ("redis://127.0.0.1:6379/0", "redis://127.0.0.1:6379/0"),
    ],
)
def test_a_url_keeps_its_host_and_user_but_not_its_password(url: str, shown: str) -> None:
    assert redact_url(url) == shown


def test_url_secrets_are_the_parts_redact_url_hides() -> None:
    assert url_secrets("redis://user:p@ss@host/0?password=zz") == ["p@ss", "zz"]
    assert url_secrets("postgresql://postgres@host/db") == []
    assert url_secrets("http://127.0.0.1:9001/v1") == [] and url_secrets(None) == []


def test_known_secrets_credentials_and_url_passwords_leave_text() -> None:
    redact = Redactor(["sk-Q7vX2mLp9RtZ", "adm-9KsD4fJh", None, ""])
    text = (
        "bad key Bearer sk-Q7vX2mLp9RtZ; Authorization: Bearer eyJhbGciOi.other; basic dXNlcjpwYXNz; "
        "admin adm-9KsD4fJh; see https://user:hunter2@example.com/x"
    )
    assert redact(text) == (
        "bad key Bearer ***; Authorization: Bearer ***; basic ***; admin ***; see https://user:***@example.com/x"
    )


def test_text_without_secrets_is_unchanged() -> None:
    text = "model 'x' does not support logprobs (max 20); see https://example.com/docs?page=2"
    assert Redactor(["sk-Q7vX2mLp9RtZ"])(text) == text


SPLIT_SECRET = "sk-live-0123456789abcdef"


@pytest.mark.parametrize(
    "text",
    [
        f"key {SPLIT_SECRET[:10]}\n{SPLIT_SECRET[10:]} refused",
        f"key {SPLIT_SECRET[:4]} \t {SPLIT_SECRET[4:]} refused",
        f"key {SPLIT_SECRET[:6]}\\n{SPLIT_SECRET[6:]} refused",  # a JSON escape written out
        f"key {SPLIT_SECRET[:6]}\\\\r\\\\n{SPLIT_SECRET[6:]} refused",  # escaped twice
        f"key {SPLIT_SECRET[:3]}\\u{ord(SPLIT_SECRET[3]):04x}{SPLIT_SECRET[4:]} refused",
        f"key {SPLIT_SECRET[:9]}\u200b{SPLIT_SECRET[9:]} refused",
    ],
)
def test_a_secret_split_or_escaped_by_the_upstream_is_redacted(text: str) -> None:
    shown = Redactor([SPLIT_SECRET])(text)
    assert shown == "key *** refused"


def test_a_secret_is_redacted_however_the_text_around_it_is_spaced() -> None:
    redact = Redactor([SPLIT_SECRET])
    assert redact(f"a b\n{SPLIT_SECRET}\nc d") == "a b\n***\nc d"
    assert redact("nothing secret here, just text") == "nothing secret here, just text"
