"""Helpers shared by every test package (import them as ``tests.support.<module>``).

* ``scripted_upstream``: the one scripted OpenAI-compatible upstream (the seam double for faults);
  ``running_upstream()`` starts one for a ``with`` block.
* ``deploy_upstream``: ``running_deploy_upstream()``, the shipped deploy/tools/scripted_upstream.py
  as a process (what the deploy examples run against).
* ``gateway_testkit``: the test policy document, the test models, the app under uvicorn.
* ``in_process_gateway``: the app in-process (``serve_in_process``, ``InProcessGateway``), its upstream
  sessions reaching the scripted upstream in memory (``scripted_transport``); ``asgi_bridge``: the
  loop thread and the httpx transports it is reached through.
* ``policy_files``: the test policy with changes, and writing it as a policy file.
* ``ports``: ``free_port()``.
* ``postgres``: the test PostgreSQL and ``drop_schema()``.
* ``shared_redis``: the real Redis at 127.0.0.1:6379, private key prefixes (``fresh_keys()``,
  ``delete_prefix()``) and a link to it that can be cut (``RedisLink``).
* ``traffic_rows``: ``stored_rows(url)``, what a traffic store holds.
* ``money``: ``worst_case_usd()``, a request's worst case as the spend contract defines it, and
  ``priced_usd()``, the price of what the scripted upstream billed (``ScriptedUpstream.billed``).
* ``provider_bills``: what a provider bills for each request the scripted upstream received
  (``ScriptedUpstream.bills``), priced with ``billed_usd()``; the faulty bodies it can send.
* ``fault_matrix``: the fault matrix's axes, its generated cells (``cells()``, pruned by rule) and
  the scripting of one cell (tests/gateway/test_fault_matrix.py runs them).
* ``fixtures``: the pytest fixtures every package may use (registered in tests/conftest.py):
  ``scripted_upstream_server`` (one per session) and ``upstream`` (reset for each test).
"""
