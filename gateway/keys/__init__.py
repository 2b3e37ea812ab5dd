"""Client keys and money at the gate: authentication, the client's address and the wrong-key
throttle, spend limits and their ledger, rate limits, budget periods.
"""
