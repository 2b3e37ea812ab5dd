"""Structurally invalid answers (runs column ``valid`` false) and answers cut at a cap the request did not
set (``truncated`` true) are never accepted by any calibrated route."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from calibration.envelope import compute_envelope
from calibration.evaluation.search import ChainScorer, ChainSpace
from calibration.frontier import frontier_thresholds, pair_frontier
from calibration.runs import load_runs
from calibration.runs_columns import RunsError

# The cheap model is confident on q1 and q3, but its q1 answer failed the checks (a call to an
# undeclared function): scored by its logprobs alone, q1 would be the first answer accepted.
ROWS = [
    ("q1", "cheap", 0, 0.001, 0.99, False),
    ("q1", "strong", 1, 0.010, 0.90, True),
    ("q2", "cheap", 0, 0.001, 0.20, True),
    ("q2", "strong", 1, 0.010, 0.80, True),
    ("q3", "cheap", 1, 0.001, 0.95, None),  # no valid column value: valid
    ("q3", "strong", 1, 0.010, 0.70, True),
    ("q4", "cheap", 1, 0.001, 0.60, True),
    ("q4", "strong", 1, 0.010, 0.60, True),
]


def write_runs(tmp_path: Path, rows: list[tuple] = ROWS) -> Path:
    path = tmp_path / "runs.jsonl"
    lines = []
    for query, model, correct, cost, score, valid in rows:
        row = {"query_id": query, "model": model, "correct": correct, "cost_usd": cost, "conf": score}
        if valid is not None:
            row["valid"] = valid
        lines.append(json.dumps(row))
    path.write_text("\n".join(lines) + "\n")
    return path


def test_an_invalid_row_scores_minus_infinity_whatever_its_confidence(tmp_path: Path) -> None:
    matrix = load_runs(write_runs(tmp_path), score_column="conf")
    cheap = matrix.model_index("cheap")
    assert matrix.score[:, cheap].tolist() == [-np.inf, 0.20, 0.95, 0.60]
    assert np.isfinite(matrix.score[:, matrix.model_index("strong")]).all()


def test_no_threshold_of_the_frontier_accepts_an_invalid_row(tmp_path: Path) -> None:
    matrix = load_runs(write_runs(tmp_path), score_column="conf")
    cheap, strong = matrix.model_index("cheap"), matrix.model_index("strong")
    thresholds = frontier_thresholds(matrix.score[:, cheap])
    assert np.isfinite(thresholds).all()
    invalid = ~np.isfinite(matrix.score[:, cheap])
    for tau in thresholds:
        assert (matrix.score[invalid, cheap] < tau).all()  # escalated at every threshold
    curve = pair_frontier(
        matrix.score[:, cheap],
        matrix.cost[:, cheap],
        matrix.quality[:, cheap],
        matrix.cost[:, strong],
        matrix.quality[:, strong],
    )
    assert curve.escalation_rate.min() == pytest.approx(0.25)  # the invalid row, always
    envelope = compute_envelope(matrix)
    for index in range(len(envelope.cost)):
        assert all(np.isfinite(t) for t in envelope.thresholds[index])


def test_chain_search_thresholds_escalate_invalid_rows_even_at_the_lowest_quantile(tmp_path: Path) -> None:
    matrix = load_runs(write_runs(tmp_path), score_column="conf")
    scorer = ChainScorer(matrix, np.arange(matrix.n_queries), ChainSpace([("cheap", "strong")]))
    thresholds = scorer.thresholds(("cheap", "strong"), np.array([[0.0], [0.5], [1.0]]))
    assert np.isfinite(thresholds).all()
    assert thresholds[0, 0] == pytest.approx(0.20)  # the lowest finite score


def test_a_valid_cell_that_is_no_boolean_names_its_row(tmp_path: Path) -> None:
    path = tmp_path / "runs.jsonl"
    path.write_text(
        json.dumps(
            {"query_id": "q", "model": "m", "correct": 1, "cost_usd": 0.1, "conf": 0.5, "valid": "maybe"}
        )
        + "\n"
    )
    with pytest.raises(RunsError, match=r"row 1: column 'valid': expected true or false"):
        load_runs(path, score_column="conf")


def test_a_row_cut_at_a_cap_the_request_did_not_set_is_never_accepted(tmp_path: Path) -> None:
    # The cheap model's q3 answer is confident, right by its grade, but cut (``truncated``): the gateway
    # escalates such an answer, so calibration must not count on accepting it.
    path = tmp_path / "runs.jsonl"
    lines = []
    for query, model, correct, cost, score, _ in ROWS:
        row = {"query_id": query, "model": model, "correct": correct, "cost_usd": cost, "conf": score}
        row["truncated"] = "TRUE" if (query, model) == ("q3", "cheap") else False
        lines.append(json.dumps(row))
    path.write_text("\n".join(lines) + "\n")
    matrix = load_runs(path, score_column="conf")
    assert matrix.score[:, matrix.model_index("cheap")].tolist() == [0.99, 0.20, -np.inf, 0.60]
    cheap = matrix.model_index("cheap")
    for tau in frontier_thresholds(matrix.score[:, cheap]):
        assert matrix.score[2, cheap] < tau


def test_a_truncated_cell_that_is_no_boolean_names_its_row(tmp_path: Path) -> None:
    path = tmp_path / "runs.jsonl"
    row = {"query_id": "q", "model": "m", "correct": 1, "cost_usd": 0.1, "conf": 0.5, "truncated": "cut"}
    path.write_text(json.dumps(row) + "\n")
    with pytest.raises(RunsError, match=r"row 1: column 'truncated': expected true or false"):
        load_runs(path, score_column="conf")
