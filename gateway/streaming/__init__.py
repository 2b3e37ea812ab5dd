"""Streamed answers: server-sent events, the live relay of a final stage, the early start, the prefix
commit.
"""
