"""What a stage is beyond its call: the bodies it sends, the black-box scorers, the review of its
answer.
"""
