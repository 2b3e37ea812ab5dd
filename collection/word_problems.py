"""Generate grade-school word problems of three and four steps, with exact integer answers.

``python -m collection.word_problems OUT.jsonl [--n 240] [--seed 0] [--prefix wp]`` writes ``--n``
problems cycling through the templates below (shopping with change, hours of pay, a book read in
two spells, a fenced garden, boxes packed after breakage, fractions of a jar, a class trip's buses
and a train's two legs). Every template needs three or four operations, so a model asked to think
step by step writes a long answer (the point of the set: a cheap stage whose answer takes long
enough that waiting for all of it is felt, docs/streaming.md). Operands come from a
``random.Random(seed)`` and are chosen so every intermediate and final value is a non-negative
integer: the same arguments give the same file, byte for byte. Graded by ``final_numeric``.

The text is this project's own (no third-party problems), under the project's licence.
"""

from __future__ import annotations

import argparse
import json
import random
from collections.abc import Callable
from pathlib import Path

Problem = tuple[str, int]

_NAMES = ("Ana", "Ben", "Chen", "Dara", "Eli", "Fatima", "Gus", "Hana", "Ivo", "Jun", "Kofi", "Lena")


def _shopping_change(rng: random.Random) -> Problem:
    name = rng.choice(_NAMES)
    pens, pen_price = rng.randint(3, 9), rng.randint(2, 7)
    books, book_price = rng.randint(2, 5), rng.randint(8, 19)
    coupon = rng.randint(3, 10)
    total = pens * pen_price + books * book_price - coupon
    paid = (total // 20 + 1) * 20 + rng.choice((0, 20, 50))
    text = (
        f"{name} buys {pens} pens at {pen_price} dollars each and {books} books at {book_price} dollars "
        f"each. A coupon takes {coupon} dollars off the total. {name} pays with {paid} dollars. "
        f"How many dollars of change does {name} get?"
    )
    return text, paid - total


def _weekend_pay(rng: random.Random) -> Problem:
    name = rng.choice(_NAMES)
    rate, saturday, sunday = rng.randint(9, 18), rng.randint(3, 8), rng.randint(2, 6)
    bonus, spent = rng.randint(5, 30), rng.randint(20, 60)
    text = (
        f"{name} earns {rate} dollars an hour, works {saturday} hours on Saturday and {sunday} hours "
        f"on Sunday, and gets a {bonus} dollar bonus for the weekend. Then {name} spends {spent} "
        f"dollars on a jacket. How many dollars does {name} have left from the weekend?"
    )
    return text, rate * (saturday + sunday) + bonus - spent


def _book_pages(rng: random.Random) -> Problem:
    name = rng.choice(_NAMES)
    first_rate, first_days = rng.randint(12, 30), rng.randint(3, 7)
    second_rate, second_days = rng.randint(20, 45), rng.randint(2, 5)
    pages = first_rate * first_days + second_rate * second_days + rng.randint(15, 120)
    text = (
        f"A book has {pages} pages. {name} reads {first_rate} pages a day for {first_days} days, "
        f"then {second_rate} pages a day for {second_days} days. How many pages are left to read?"
    )
    return text, pages - first_rate * first_days - second_rate * second_days


def _garden_fence(rng: random.Random) -> Problem:
    length, width = rng.randint(8, 30), rng.randint(4, 20)
    per_meter, gate = rng.randint(3, 12), rng.randint(15, 80)
    text = (
        f"A rectangular garden is {length} meters long and {width} meters wide. Fencing costs "
        f"{per_meter} dollars per meter, and a gate costs {gate} dollars more. How many dollars does "
        f"it cost to fence the whole garden and add the gate?"
    )
    return text, 2 * (length + width) * per_meter + gate


def _bakery_boxes(rng: random.Random) -> Problem:
    trays, per_tray = rng.randint(4, 9), rng.randint(12, 30)
    per_box = rng.choice((4, 5, 6, 8, 10))
    baked = trays * per_tray
    broken = baked % per_box + per_box * rng.randint(0, 2)
    if broken == 0:
        broken = per_box
    text = (
        f"A baker makes {trays} trays of {per_tray} cookies. {broken} cookies break and are thrown "
        f"away. The rest are packed in boxes of {per_box}. How many boxes does the baker fill?"
    )
    return text, (baked - broken) // per_box


def _jar_fractions(rng: random.Random) -> Problem:
    # Total divisible by 3 (or 4), and what remains divisible by 2.
    unit = rng.randint(4, 20)
    first_part = rng.choice((3, 4))
    total = unit * first_part * 2
    red = total // first_part
    rest = total - red
    blue = rest // 2
    added = rng.randint(5, 25)
    text = (
        f"A jar holds {total} marbles. One {'third' if first_part == 3 else 'quarter'} of them are red. "
        f"Half of the marbles that are not red are blue, and the others are green. Then {added} more "
        f"green marbles are put in the jar. How many green marbles are in the jar now?"
    )
    return text, rest - blue + added


def _school_trip(rng: random.Random) -> Problem:
    classes, students = rng.randint(3, 8), rng.randint(18, 32)
    teachers = rng.randint(classes, 2 * classes)
    seats = rng.choice((20, 25, 30, 40, 45))
    people = classes * students + teachers
    buses = -(-people // seats)
    text = (
        f"A school takes {classes} classes of {students} students each on a trip, with {teachers} "
        f"teachers. Each bus has {seats} seats. They take as few buses as they can. "
        f"How many seats are empty?"
    )
    return text, buses * seats - people


def _train_legs(rng: random.Random) -> Problem:
    first_speed, first_hours = rng.randint(40, 90), rng.randint(2, 5)
    second_speed, second_hours = rng.randint(30, 80), rng.randint(1, 4)
    back = rng.randint(20, first_speed * first_hours)
    text = (
        f"A train travels at {first_speed} kilometers an hour for {first_hours} hours, then at "
        f"{second_speed} kilometers an hour for {second_hours} hours. It then goes {back} kilometers "
        f"back along the same track. How many kilometers is it from where it started?"
    )
    return text, first_speed * first_hours + second_speed * second_hours - back


TEMPLATES: dict[str, Callable[[random.Random], Problem]] = {
    "shopping_change": _shopping_change,
    "weekend_pay": _weekend_pay,
    "book_pages": _book_pages,
    "garden_fence": _garden_fence,
    "bakery_boxes": _bakery_boxes,
    "jar_fractions": _jar_fractions,
    "school_trip": _school_trip,
    "train_legs": _train_legs,
}


def generate(n: int, seed: int, prefix: str = "wp") -> list[dict[str, str]]:
    """``n`` prompt-set records (``collection.prompts`` format), deterministic for (n, seed, prefix).

    Question ``i`` uses template ``i mod len(TEMPLATES)``, so every prefix of the file has each
    template within one of the same count.
    """
    rng = random.Random(seed)
    kinds = list(TEMPLATES)
    records = []
    for index in range(n):
        kind = kinds[index % len(kinds)]
        question, answer = TEMPLATES[kind](rng)
        if answer < 0:  # the operand ranges above exclude it; a template edit that breaks this fails loud
            raise AssertionError(f"{kind} gave a negative answer: {question}")
        records.append(
            {
                "query_id": f"{prefix}-{seed}-{index:04d}",
                "prompt": question,
                "answer": str(answer),
                "grader": "final_numeric",
                "dataset": "word_problems",
                "subject": kind,
            }
        )
    return records


def main(argv: list[str] | None = None) -> None:
    """Write the generated set as JSONL."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("output", type=Path)
    parser.add_argument("--n", type=int, default=240)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--prefix", default="wp", help="query_id prefix")
    args = parser.parse_args(argv)
    lines = [json.dumps(record, ensure_ascii=False) for record in generate(args.n, args.seed, args.prefix)]
    args.output.write_text("\n".join(lines) + "\n", encoding="utf-8")


if __name__ == "__main__":
    main()
