"""Collecting per-query runs from OpenAI-compatible models: prompt sets, the collector, the runs table."""
