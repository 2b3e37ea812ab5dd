"""Recalibration: recalibrate a served policy on fresh traffic and check it on held-out queries.

``recalibrate`` runs ``cascade recalibrate`` (export, split, calibrate, compare, decide, push) with
its ``options``; ``traffic_runs`` loads the exported traffic per request kind, ``kind_results``
compares each kind and says when kinds refuse a policy; ``outcomes`` scores a policy's tiers query
by query, ``compare`` gives their paired intervals (``stats.bootstrap``, shared with ``cascade
replay``), ``rule`` is the push rule, ``report`` the tables and JSON report, ``redis_io`` reads and
pushes the served policy through ``publishing``; ``label_free`` is the study of
judge-labelled calibration against ground truth. It imports ``traffic`` and ``policies``, never
``gateway``.
"""
