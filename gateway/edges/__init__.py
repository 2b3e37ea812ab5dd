"""The API edges: one translation module per client API in front of the one cascade engine."""
