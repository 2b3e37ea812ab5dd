"""The `cascade serve|policy|keys|models check` commands."""
