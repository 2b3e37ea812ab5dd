"""The names of everything the gateway keeps in Redis, and the batcher every Redis call goes through."""
