"""The pool's install errors: each message is one line and says what to do."""

from __future__ import annotations


class InstallError(Exception):
    """Installing the pool failed; the message is one line and says what to do."""


class ChecksumError(InstallError):
    """An assembled model file does not have the pinned SHA-256."""
