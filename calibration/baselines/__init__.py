"""Comparison methods for held-out evaluation: fixed chains, optimized subsequences, a router."""
