"""Offline calibration: from a runs table to a policy file (``cascade calibrate|evaluate``).

``runs`` loads and validates a runs table (priced with ``prices``), ``frontier`` and ``envelope``
compute every pair's exact cost-quality frontier and their pairwise envelope, ``tiers`` solves each
budget tier on it and ``policy_writer`` writes the policy the gateway serves. ``evaluation`` checks
on held-out splits how the choices hold up against baselines; ``diagnostics``, ``metrics`` and
``reporting`` explain the results. It never imports ``gateway``; ``policies`` is the contract both
sides share.
"""
