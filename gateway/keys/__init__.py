"""Client keys and money at the gate: authentication, its throttle, spend limits and their ledger, rate
limits, budget periods.
"""
