"""Loading runs tables: formats, costs, scores, filters and one-line errors."""

from __future__ import annotations

import gzip
import json
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from calibration.runs import load_runs
from calibration.runs_columns import RunsError
from money import Price
from money.usage import Usage
from policies.scorers import score_logprobs
from tests.support.data_files import PLAUT_PRICES, UPSTREAM_ANSWERS

ROWS = [
    # query_id, model, correct, cost_usd, score
    ("q1", "big", 1, 0.010, 0.9),
    ("q1", "small", 0, 0.001, 0.2),
    ("q2", "big", 1, 0.012, 0.8),
    ("q2", "small", 1, 0.001, 0.7),
    ("q3", "big", 0, 0.011, 0.4),
    ("q3", "small", 0, 0.002, 0.1),
]


def frame(rows: list[tuple] = ROWS) -> pd.DataFrame:
    return pd.DataFrame(rows, columns=["query_id", "model", "correct", "cost_usd", "conf"])


def write(tmp_path: Path, df: pd.DataFrame, name: str = "runs.csv") -> Path:
    path = tmp_path / name
    if name.endswith((".csv", ".csv.gz")):
        df.to_csv(path, index=False)
    elif name.endswith(".parquet"):
        df.to_parquet(path, index=False)
    elif name.endswith(".jsonl"):
        df.to_json(path, orient="records", lines=True)
    return path


def write_csv_text(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "runs.csv"
    path.write_text(text)
    return path


@pytest.mark.parametrize("name", ["runs.csv", "runs.csv.gz", "runs.parquet", "runs.jsonl"])
def test_every_format_loads_the_same_matrix(tmp_path: Path, name: str) -> None:
    matrix = load_runs(write(tmp_path, frame(), name), score_column="conf")
    assert matrix.models == ("small", "big")  # cost order
    assert matrix.query_ids.tolist() == ["q1", "q2", "q3"]
    assert matrix.quality.tolist() == [[0, 1], [1, 1], [0, 0]]
    assert matrix.cost[:, 0].tolist() == pytest.approx([0.001, 0.001, 0.002])
    assert matrix.score[:, 1].tolist() == pytest.approx([0.9, 0.8, 0.4])
    assert matrix.scorer == "external" and matrix.score_column == "conf"


def test_subset_keeps_models_and_selects_queries(tmp_path: Path) -> None:
    matrix = load_runs(write(tmp_path, frame()), score_column="conf").subset(np.array([2, 0]))
    assert matrix.query_ids.tolist() == ["q3", "q1"] and matrix.models == ("small", "big")


def test_where_filters_rows_and_dataset_becomes_strata(tmp_path: Path) -> None:
    other = frame().assign(dataset="b", query_id=lambda d: d.query_id + "b")
    df = pd.concat([frame().assign(dataset="a"), other])
    df.loc[df.dataset == "b", "correct"] = 1
    matrix = load_runs(write(tmp_path, df), score_column="conf", where={"dataset": "b"})
    assert matrix.n_queries == 3 and matrix.quality.min() == 1
    assert matrix.strata.tolist() == ["b", "b", "b"]


def test_price_sheet_per_query_cost(tmp_path: Path) -> None:
    prices = tmp_path / "prices.yaml"
    prices.write_text("models:\n  small: {per_query_usd: 0.5}\n  big: {per_query_usd: 2}\n")
    df = frame().drop(columns="cost_usd")
    matrix = load_runs(write(tmp_path, df), prices=prices, score_column="conf")
    assert matrix.cost.tolist() == [[0.5, 2.0]] * 3


def test_price_sheet_token_prices_are_preferred_when_runs_have_tokens(tmp_path: Path) -> None:
    prices = tmp_path / "prices.yaml"
    prices.write_text(
        "models:\n  small: {input_per_mtok: 1, output_per_mtok: 2, per_query_usd: 9}\n"
        "  big: {per_query_usd: 3}\n"
    )
    df = frame().drop(columns="cost_usd").assign(prompt_tokens=1000, completion_tokens=500)
    matrix = load_runs(write(tmp_path, df), prices=prices, score_column="conf")
    assert matrix.cost[:, 0].tolist() == pytest.approx([(1000 * 1 + 500 * 2) / 1e6] * 3)
    assert matrix.cost[:, 1].tolist() == pytest.approx([3.0] * 3)  # big has no token prices


def test_plaut_prices_without_tokens_use_per_query(tmp_path: Path) -> None:
    df = frame().drop(columns="cost_usd").replace({"small": "Yi-6b", "big": "gpt-4-turbo"})
    prices = PLAUT_PRICES
    matrix = load_runs(write(tmp_path, df), prices=prices, score_column="conf")
    assert matrix.models == ("Yi-6b", "gpt-4-turbo")
    assert matrix.cost[0].tolist() == pytest.approx([0.00002114, 0.00153])


def test_scores_from_logprobs_use_the_gateway_scorer(tmp_path: Path) -> None:
    fixtures = UPSTREAM_ANSWERS
    contents = [
        json.loads((fixtures / name).read_text())["choices"][0]["logprobs"]["content"]
        for name in ("llamacpp_smol_top15.json", "native_smol_top15.json")
    ]
    path = tmp_path / "runs.jsonl"
    with path.open("w") as handle:
        for q, content in enumerate(contents):
            for model, cost in (("small", 1), ("big", 5)):
                record = {"query_id": f"q{q}", "model": model, "correct": 1, "cost_usd": cost}
                record["logprobs"] = json.dumps(content) if model == "small" else content  # text or JSON
                handle.write(json.dumps(record) + "\n")
    matrix = load_runs(path, scorer="min_token_negentropy", top_k=5)
    expected = [score_logprobs(c, "min_token_negentropy", 5) for c in contents]
    assert matrix.score[:, 0].tolist() == pytest.approx(expected)
    assert matrix.score[:, 1].tolist() == pytest.approx(expected)
    assert (matrix.scorer, matrix.top_k) == ("min_token_negentropy", 5)
    assert load_runs(path).scorer == "mean_token_negentropy"  # the default


def test_missing_scores_drop_the_query_for_every_model_with_a_counting_note(tmp_path: Path) -> None:
    path = write_csv_text(
        tmp_path,
        "query_id,model,correct,cost_usd,conf\nq1,a,1,1,0.5\nq1,b,1,2,\nq2,a,1,1,0.5\nq2,b,0,2,0.1\n"
        "q3,a,0,1,\nq3,b,0,2,\n",
    )
    matrix = load_runs(path, score_column="conf")
    assert matrix.query_ids.tolist() == ["q2"]
    assert matrix.notes == ("dropped 2 queries (4 rows) with a missing score (column 'conf')",)


def test_a_model_without_logprobs_is_named_when_no_query_is_left(tmp_path: Path) -> None:
    fixture = UPSTREAM_ANSWERS / "llamacpp_smol_top15.json"
    content = json.loads(fixture.read_text())["choices"][0]["logprobs"]["content"]
    records = [
        {
            "query_id": f"q{i}",
            "model": model,
            "correct": 1,
            "cost_usd": cost,
            "logprobs": content if model != "no-logprobs" else None,
        }
        for i in range(3)
        for model, cost in (("small", 1.0), ("no-logprobs", 2.0), ("big", 3.0))
    ]
    path = tmp_path / "runs.jsonl"
    path.write_text("".join(json.dumps(record) + "\n" for record in records))
    with pytest.raises(RunsError) as caught:
        load_runs(path)
    message = str(caught.value)
    assert "no query left" in message and "'no-logprobs' (all of 3 rows)" in message
    assert "every model needs a score" in message
    assert "'small'" not in message and "'big'" not in message


HEADER = "query_id,model,correct,cost_usd,conf\n"


@pytest.mark.parametrize(
    ("text", "kwargs", "message"),
    [
        ("query_id,model,cost_usd,conf\nq1,a,1,0.5\n", {}, "missing required column 'correct'"),
        (HEADER + "q1,a,1,1,0.5\nq1,b,yes,1,0.5\n", {}, "row 2: column 'correct': non-numeric value 'yes'"),
        (HEADER + "q1,a,1,1,0.5\nq1,b,2,1,0.5\n", {}, "row 2: column 'correct': quality 2 outside [0, 1]"),
        (HEADER + "q1,a,1,1,0.5\nq1,b,1,abc,0.5\n", {}, "row 2: column 'cost_usd': non-numeric value 'abc'"),
        (HEADER + "q1,a,1,1,0.5\nq1,b,1,,0.5\n", {}, "row 2: column 'cost_usd': missing value"),
        (HEADER + "q1,a,1,1,0.5\nq1,a,0,1,0.2\n", {}, "row 2: duplicate (query_id, model) = ('q1', 'a')"),
        (HEADER + "q1,a,1,1,0.5\nq1,b,1,1,0.5\nq2,a,1,1,0.5\n", {}, "query 'q2' has no row for model 'b'"),
        (HEADER + "q1,a,1,1,0.5\nq1,b,1,1,NaN\n", {}, "row 2: column 'conf': NaN value"),
        (HEADER + "q1,a,1,1,0.5\n", {"score_column": "score"}, "missing score column 'score'"),
        (HEADER + "q1,a,1,1,0.5\n", {"score_column": None}, "no score: pass --score-column"),
        ("query_id,model,correct,conf\nq1,a,1,0.5\n", {}, "no cost: the runs have no 'cost_usd' column"),
        (HEADER + "q1,a,1,1,0.5\n", {"where": {"split": "x"}}, "--where column 'split' is not in the file"),
        (HEADER + "q1,a,1,1,0.5\n", {"where": {"model": "zz"}}, "no rows match --where model=zz"),
        (
            "query_id,model,correct,cost_usd,logprobs\nq1,a,1,1,{oops\n",
            {"score_column": None},
            "row 1: column 'logprobs': not valid JSON",
        ),
    ],
)
def test_bad_runs_give_one_line_errors_naming_file_row_and_column(
    tmp_path: Path, text: str, kwargs: dict, message: str
) -> None:
    path = write_csv_text(tmp_path, text)
    options = {"score_column": "conf", **kwargs}
    with pytest.raises(RunsError) as caught:
        load_runs(path, **options)
    text_of_error = str(caught.value)
    assert text_of_error.startswith(str(path)) and message in text_of_error
    assert "\n" not in text_of_error


def test_nan_score_in_parquet_is_an_error_but_null_is_dropped(tmp_path: Path) -> None:
    import pyarrow as pa
    import pyarrow.parquet as pq

    columns = frame().to_dict(orient="list")
    with_nan = dict(columns, conf=pa.array([0.9, float("nan"), 0.8, 0.7, 0.4, 0.1], from_pandas=False))
    pq.write_table(pa.table(with_nan), tmp_path / "nan.parquet")
    with pytest.raises(RunsError, match=r"row 2: column 'conf': NaN value"):
        load_runs(tmp_path / "nan.parquet", score_column="conf")
    with_null = dict(columns, conf=pa.array([0.9, None, 0.8, 0.7, 0.4, 0.1]))
    pq.write_table(pa.table(with_null), tmp_path / "null.parquet")
    matrix = load_runs(tmp_path / "null.parquet", score_column="conf")
    assert matrix.query_ids.tolist() == ["q2", "q3"]


def test_model_missing_from_the_price_sheet_is_named(tmp_path: Path) -> None:
    prices = tmp_path / "prices.yaml"
    prices.write_text("models:\n  small: {per_query_usd: 1}\n")
    with pytest.raises(RunsError, match="model 'big' is not in the price sheet"):
        load_runs(write(tmp_path, frame()), prices=prices, score_column="conf")


def test_token_only_prices_without_token_columns_is_an_error(tmp_path: Path) -> None:
    prices = tmp_path / "prices.yaml"
    prices.write_text("models:\n  small: {input_per_mtok: 1, output_per_mtok: 1}\n  big: {per_query_usd: 1}")
    with pytest.raises(RunsError, match="'small' has only token prices"):
        load_runs(write(tmp_path, frame()), prices=prices, score_column="conf")


def test_malformed_price_sheet_is_a_runs_error(tmp_path: Path) -> None:
    prices = tmp_path / "prices.yaml"
    prices.write_text("models:\n  small: {per_query_usd: free}\n")
    with pytest.raises(RunsError, match=r"models.small.per_query_usd: not a number"):
        load_runs(write(tmp_path, frame()), prices=prices, score_column="conf")


def test_unknown_format_and_missing_file_are_one_line_errors(tmp_path: Path) -> None:
    with pytest.raises(RunsError, match="unknown runs format"):
        load_runs(tmp_path / "runs.xlsx", score_column="conf")
    with pytest.raises(RunsError, match="no such file"):
        load_runs(tmp_path / "absent.csv", score_column="conf")


def test_truncated_gzip_is_a_one_line_error(tmp_path: Path) -> None:
    path = tmp_path / "runs.csv.gz"
    data = gzip.compress(frame().to_csv(index=False).encode())
    path.write_bytes(data[: len(data) // 2])
    with pytest.raises(RunsError, match="cannot read"):
        load_runs(path, score_column="conf")


def test_feature_columns_become_per_query_features(tmp_path: Path) -> None:
    df = frame().assign(length=[10, 10, 20, 20, 30, 30], per_model=[1, 3, 1, 3, 1, 3])
    matrix = load_runs(write(tmp_path, df), score_column="conf", feature_columns=["length", "per_model"])
    assert matrix.features.tolist() == [[10, 2], [20, 2], [30, 2]]  # mean over the query's rows
    with pytest.raises(RunsError, match="missing feature column 'absent'"):
        load_runs(write(tmp_path, df), score_column="conf", feature_columns=["absent"])


def test_cached_and_reasoning_token_columns_are_priced_at_the_part_rates(tmp_path: Path) -> None:
    """A cheap stage that hits the prompt cache gets cheaper: calibration sees it."""
    prices = tmp_path / "prices.yaml"
    prices.write_text(
        "models:\n"
        "  small: {input_per_mtok: 1, output_per_mtok: 2, cache_read_per_mtok: 0.1, reasoning_per_mtok: 4}\n"
        "  big: {input_per_mtok: 1, output_per_mtok: 2}\n"
    )
    df = frame().drop(columns="cost_usd").assign(prompt_tokens=1000, completion_tokens=500)
    # small: 800 of the 1000 prompt tokens read from the cache on q1, none on q2 (an empty cell), 100
    # reasoning tokens on q3; big (no part rates) is priced the same whatever its parts.
    df["cached_tokens"] = [0, 800, 0, None, 400, 0]
    df["reasoning_tokens"] = [0, 0, 0, 0, 50, 100]
    matrix = load_runs(write(tmp_path, df, "runs.jsonl"), prices=prices, score_column="conf")
    small, big = matrix.model_index("small"), matrix.model_index("big")
    plain = (1000 * 1 + 500 * 2) / 1e6
    assert matrix.cost[:, small].tolist() == pytest.approx(
        [plain - 800 * 0.9 / 1e6, plain, plain + 100 * 2 / 1e6]
    )
    assert matrix.cost[:, big].tolist() == pytest.approx([plain] * 3)


def test_a_row_with_1_hour_cache_writes_reprices_them_at_the_1_hour_rate(tmp_path: Path) -> None:
    """The 1-hour writes among a row's cache writes cost the 1-hour rate, the rest the 5-minute one,
    as the gateway charges the same usage (Price.usage_cost_usd)."""
    prices = tmp_path / "prices.yaml"
    prices.write_text(
        "models:\n"
        "  small: {input_per_mtok: 3, output_per_mtok: 15, cache_write_per_mtok: 3.75,"
        " cache_write_1h_per_mtok: 6}\n"
        "  big: {input_per_mtok: 3, output_per_mtok: 15}\n"
    )
    df = frame().drop(columns="cost_usd").assign(prompt_tokens=1000, completion_tokens=100)
    df["cache_write_tokens"] = [0, 0, 0, 600, 0, 600]  # small's rows are the odd ones: q1, q2, q3
    df["cache_write_1h_tokens"] = [0, 0, 0, 600, 0, 200]
    matrix = load_runs(write(tmp_path, df), prices=prices, score_column="conf")
    small = matrix.model_index("small")
    usage = [Usage(1000, 100), Usage(1000, 100, 0, 0, 600), Usage(1000, 100, 0, 400, 200)]
    sheet = Price(input_per_mtok=3, output_per_mtok=15, cache_write_per_mtok=3.75, cache_write_1h_per_mtok=6)
    assert matrix.cost[:, small].tolist() == pytest.approx([sheet.usage_cost_usd(u) for u in usage])
    assert matrix.cost[1, small] == pytest.approx((400 * 3 + 600 * 6 + 100 * 15) / 1e6)


def test_more_1_hour_cache_writes_than_cache_writes_is_an_error_naming_its_row(tmp_path: Path) -> None:
    prices = tmp_path / "prices.yaml"
    prices.write_text(
        "models:\n  small: {input_per_mtok: 1, output_per_mtok: 2}\n  big: {per_query_usd: 1}\n"
    )
    df = frame().drop(columns="cost_usd").assign(prompt_tokens=10, completion_tokens=5)
    df["cache_write_tokens"] = 2
    df["cache_write_1h_tokens"] = [0, 0, 3, 0, 0, 0]
    with pytest.raises(RunsError, match="cache_write_1h_tokens"):
        load_runs(write(tmp_path, df), prices=prices, score_column="conf")


def test_a_negative_part_count_is_an_error_naming_its_row(tmp_path: Path) -> None:
    prices = tmp_path / "prices.yaml"
    prices.write_text(
        "models:\n  small: {input_per_mtok: 1, output_per_mtok: 2}\n  big: {per_query_usd: 1}\n"
    )
    df = frame().drop(columns="cost_usd").assign(prompt_tokens=10, completion_tokens=5, cached_tokens=0)
    df.loc[3, "cached_tokens"] = -1
    with pytest.raises(RunsError, match="cached_tokens"):
        load_runs(write(tmp_path, df), prices=prices, score_column="conf")
