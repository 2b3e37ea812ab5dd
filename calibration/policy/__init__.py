"""From a runs table to the policy file: one calibration (``calibrate``), one per request kind
(``kinds``), the commit rule chosen held out (``commit_choice``), and the document itself
(``policy_writer``, with the scores' ``score_distribution``)."""
