"""Judges: label a model's answer by its agreement with the reference model's answer.

``make_judge(config)`` builds one from a ``JudgeConfig`` (``traffic.judges.config``; from plain data:
``parse_judge_config``);
``label_answers`` labels every model's answer of one query.
"""

from traffic.judges.base import Judge, JudgeError, Verdict, label_answers
from traffic.judges.config import JudgeConfig, make_judge, parse_judge_config

__all__ = [
    "Judge",
    "JudgeConfig",
    "JudgeError",
    "Verdict",
    "label_answers",
    "make_judge",
    "parse_judge_config",
]
