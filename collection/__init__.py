"""Collecting per-query runs from OpenAI-compatible models: prompt sets, graders, the runs table."""
