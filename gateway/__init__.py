"""The OpenAI-compatible cascade gateway (``cascade serve``).

Per request: choose a tier and route from the served policy (``routing``), call the cheap model with
logprobs, score its answer with the scorer of ``policies`` and accept it or escalate (``engine``,
with the stages' bodies and answer review in ``stages`` and streamed answers in ``streaming``), and
answer in the client's API with the ``x-cascade-*`` headers (``api``). Around that: what a request
is on the wire (``wire``), the config (``config``), upstream clients (``upstream``), client keys,
spend and rate limits (``keys``) shared through Redis (``redis``), Prometheus metrics
(``telemetry``), learning from traffic (``learning``), what one app is built of (``assembly``) and
the ``cascade serve|policy|keys`` commands (``commands``). The rooms and the floors they import
along are in docs/architecture.md; the contracts it keeps are in docs/contracts.md. It never
imports ``calibration`` or pandas; nothing runs at import.
"""
