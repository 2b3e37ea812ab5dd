"""The generated arithmetic set: exact answers, the stated mix in every prefix, byte-for-byte seeds."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
from generated_sets import generated_twice_alike

from collection.arithmetic import MULTI_STEP, QUICK, generate, kind_sequence, main
from graders import grade


def _evaluate(question: str) -> int | None:
    """The value of a bare expression question ("What is 12 * 3 + 4?"), else None."""
    match = re.fullmatch(r"What is ([0-9 +\-*()]+)\?", question)
    return eval(match.group(1)) if match else None  # digits and operators only


def test_every_expression_answer_is_its_exact_value() -> None:
    records = generate(240, seed=3)
    checked = 0
    for record in records:
        value = _evaluate(record["prompt"])
        if value is not None:
            assert str(value) == record["answer"], record
            checked += 1
        assert int(record["answer"]) >= 0
    assert checked > 60


@pytest.mark.parametrize("share", [0.0, 0.25, 2 / 3, 1.0])
def test_each_prefix_holds_the_stated_share_of_quick_questions(share: float) -> None:
    kinds = kind_sequence(90, share)
    for prefix in (9, 30, 90):
        quick = sum(kind in QUICK for kind in kinds[:prefix])
        assert abs(quick - share * prefix) < 1.0, (prefix, quick)
    assert set(kinds) <= set(QUICK) | set(MULTI_STEP)


def test_each_group_cycles_through_all_its_templates() -> None:
    kinds = kind_sequence(300, 2 / 3)
    assert {kind for kind in kinds if kind in QUICK} == set(QUICK)
    assert {kind for kind in kinds if kind in MULTI_STEP} == set(MULTI_STEP)


def test_a_share_outside_zero_one_is_refused() -> None:
    with pytest.raises(ValueError, match="quick share"):
        kind_sequence(10, 1.5)


def test_the_same_arguments_give_the_same_file_and_a_loadable_set(tmp_path: Path) -> None:
    prompts = generated_twice_alike(main, tmp_path, "--n", "40", "--seed", "7")
    assert len(prompts) == 40
    assert all(grade(p.grader, f"Answer: {p.answer}", p.answer) == 1.0 for p in prompts)


def test_the_committed_sets_are_what_the_generator_writes(repo_root: Path, tmp_path: Path) -> None:
    """The demo's calibration sets (seeds 0 and 2) and its held-out set (seed 1) are reproducible."""
    sets = (
        ("arithmetic.jsonl", 300, 0, 2 / 3),
        ("arithmetic-quick.jsonl", 200, 2, 1.0),
        ("arithmetic-heldout.jsonl", 60, 1, 0.8),
    )
    for name, n, seed, share in sets:
        regenerated = tmp_path / name
        main([str(regenerated), "--n", str(n), "--seed", str(seed), "--quick-share", str(share)])
        committed = repo_root / "collection" / "data" / name
        assert committed.read_bytes() == regenerated.read_bytes(), name
        ids = {json.loads(line)["query_id"] for line in committed.read_text().splitlines()}
        assert len(ids) == n
