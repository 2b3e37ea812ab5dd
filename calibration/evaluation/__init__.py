"""Held-out evaluation of cascade policies (``cascade evaluate``).

Every method follows one protocol per split: build candidate routes and measure them on the
calibration rows, choose for each budget on the cost grid the best calibration candidate within
that budget, then report that candidate's quality and cost on the test rows.

Methods: the envelope and its concave hull (``heldout``), single models, and the comparison
baselines: the full fixed chain (``fixed_chain``), the optimized subsequence cascade searched with
NSGA-II or random search (``subsequence``, ``search``) and a pre-generation router (``router``).
"""
