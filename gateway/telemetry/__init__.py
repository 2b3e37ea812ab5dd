"""Prometheus metrics."""
