"""Calling the models: the upstream client and pool, their health checks, and the capability check."""
