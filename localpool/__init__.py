"""localpool."""
