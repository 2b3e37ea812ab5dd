"""Which tier and route a request takes: the tier choice from the policy, and the routed tiers' model
choice.
"""
