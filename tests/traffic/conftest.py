"""Traffic test fixtures: ``store_url`` (each backend), ``postgres_url`` and ``file_url`` come from
the shared plugin tests/support/traffic_stores.py (registered in tests/conftest.py)."""
