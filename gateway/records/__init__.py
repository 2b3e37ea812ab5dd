"""Request records: each request's decision as the operator console shows it (gateway.console).

``record.py`` builds a request's record from the facts the gateway computed for it; ``store.py`` and
``stream_store.py`` keep the newest ones (an in-process ring, or a capped Redis stream every replica
writes to); ``recorder.py`` is what the endpoint calls once a request is settled.
"""
