"""The cascade engine: runs a route's stages, scores, accepts or escalates."""
