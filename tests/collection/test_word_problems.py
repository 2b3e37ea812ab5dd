"""The generated word problems: answers recomputed from the text, every template, byte-for-byte seeds."""

from __future__ import annotations

import json
import re
from pathlib import Path

from generated_sets import generated_twice_alike

from collection.word_problems import TEMPLATES, generate, main

ROOT = Path(__file__).resolve().parents[2]
DATA = ROOT / "collection" / "data"


def _numbers(text: str) -> list[int]:
    return [int(n) for n in re.findall(r"\d+", text)]


def _solve(kind: str, text: str) -> int:
    """The answer worked out again from the question's own numbers, template by template."""
    n = _numbers(text)
    if kind == "shopping_change":
        pens, pen_price, books, book_price, coupon, paid = n
        return paid - (pens * pen_price + books * book_price - coupon)
    if kind == "weekend_pay":
        rate, saturday, sunday, bonus, spent = n
        return rate * (saturday + sunday) + bonus - spent
    if kind == "book_pages":
        pages, r1, d1, r2, d2 = n
        return pages - r1 * d1 - r2 * d2
    if kind == "garden_fence":
        length, width, per_meter, gate = n
        return 2 * (length + width) * per_meter + gate
    if kind == "bakery_boxes":
        trays, per_tray, broken, per_box = n
        assert (trays * per_tray - broken) % per_box == 0, text
        return (trays * per_tray - broken) // per_box
    if kind == "jar_fractions":
        total, added = n
        red = total // 3 if "One third" in text else total // 4
        assert red * (3 if "One third" in text else 4) == total and (total - red) % 2 == 0, text
        return (total - red) - (total - red) // 2 + added
    if kind == "school_trip":
        classes, students, teachers, seats = n
        people = classes * students + teachers
        return -(-people // seats) * seats - people
    if kind == "train_legs":
        s1, h1, s2, h2, back = n
        return s1 * h1 + s2 * h2 - back
    raise AssertionError(kind)


def test_every_answer_is_the_value_the_question_states() -> None:
    records = generate(400, seed=5)
    for record in records:
        assert int(record["answer"]) == _solve(record["subject"], record["prompt"]), record
        assert int(record["answer"]) >= 0


def test_each_template_comes_in_turn_so_every_prefix_has_the_same_mix() -> None:
    kinds = [record["subject"] for record in generate(len(TEMPLATES) * 3, seed=1)]
    assert kinds == list(TEMPLATES) * 3


def test_the_same_arguments_give_the_same_file_and_a_loadable_set(tmp_path: Path) -> None:
    prompts = generated_twice_alike(main, tmp_path, "--n", "24", "--seed", "7")
    assert len(prompts) == 24 and all(p.grader == "final_numeric" for p in prompts)


def test_the_committed_sets_are_what_their_commands_write(tmp_path: Path) -> None:
    for name, args in {
        "word-problems.jsonl": ["--n", "240", "--seed", "0"],
        "word-problems-heldout.jsonl": ["--n", "60", "--seed", "1"],
    }.items():
        out = tmp_path / name
        main([str(out), *args])
        assert out.read_bytes() == (DATA / name).read_bytes(), name
        ids = [json.loads(line)["query_id"] for line in out.read_text().splitlines()]
        assert len(set(ids)) == len(ids)
