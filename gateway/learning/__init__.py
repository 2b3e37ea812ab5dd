"""Learning from the gateway's own traffic: sample requests, shadow-call the rest of the pool, label.

A sampled cascade request (``learning.sample_rate``) is queued after its response has been sent.
A background worker calls every pool model the request did not answer with (as a scored stage),
labels each answer by its agreement with the reference model's answer (a ``traffic`` judge) and
writes one traffic row per model to the store, in batches. Nothing here runs on the client's clock.

Modules: ``config`` (the ``learning:`` section), ``answers`` (what a sample carries), ``budget``
(the shadow spend cap), ``writer`` (batched store writes), ``shadow`` (the shadow calls and rows of
one sample), ``sampler`` (``TrafficSampler``: the draw, the queue, the workers and their
lifecycle). The ``traffic`` stores and the sampler's judge are imported only when learning is
enabled (``sampler``, which the app imports then); the judges' settings schema
(``traffic.judges.config``) is part of every config, and the text and equivalence judges are loaded
with ``import gateway.api.app`` anyway: the ``consistency`` scorer (gateway.stages.blackbox_scoring)
uses them.
"""
