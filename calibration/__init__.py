"""Offline calibration: from a runs table to a policy file (``cascade calibrate|evaluate|recalibrate``).

The folders are floors (docs/architecture.md, ``tests/test_import_graph.py``), each importing only
lower ones. At the bottom, the modules here: ``runs`` loads and validates a runs table (priced with
``money``), ``frontier`` and ``envelope`` compute every pair's exact cost-quality frontier and their
pairwise envelope, ``tiers`` solves each budget tier on it, ``heldout_expected`` measures the tiers
held out; ``diagnostics`` and ``metrics`` explain the results. Above them ``routing`` (the router
and its mechanisms), then ``evaluation`` (held-out protocol and baselines) and ``policy`` (one
calibration, per request kind, and the policy file the gateway serves), then ``reporting`` and
``recalibration``, and ``commands`` on top. It never imports ``gateway``; ``policies`` is the
contract both sides share.
"""
