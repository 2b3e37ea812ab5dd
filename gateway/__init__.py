"""The OpenAI-compatible cascade gateway (``cascade serve``).

Per request: choose a route from the served policy (``routing``), call the cheap model with
logprobs, score its answer with the scorer of ``policies`` and accept it or escalate
(``cascade``), and answer with the ``x-cascade-*`` headers (``completions``, ``streaming``).
Around that: the config (``config``), upstream clients (``upstream``), the policy store with hot
reload (``policy_store``), client keys and spend limits shared through Redis (``auth``, ``spend``,
``state``, ``redis_keys``), Prometheus metrics (``metrics``), one error hierarchy (``errors``) and
the ``cascade serve|policy|keys`` commands (``cli``, ``policy_cli``, ``keys_cli``, and ``redis_cli``
which the last two share). The contracts it keeps are in docs/contracts.md. It never imports
``calibration`` or pandas; nothing runs at import.
"""
