"""Learning from traffic: labels without ground truth (judges) and the store of sampled rows.

Shared by the gateway (which writes sampled rows) and the ``cascade traffic`` commands (which
export them as a runs table); it imports neither ``gateway`` nor ``calibration``.
"""
