"""Generate the arithmetic prompt set of the local demo: short problems with exact integer answers.

``python -m collection.arithmetic OUT.jsonl [--n 300] [--seed 0] [--quick-share 0.667]`` writes
``--n`` problems: a ``--quick-share`` of one-step questions (a sum, a difference, a times-table
product, a one-step count) and the rest multi-step (two-operation expressions with two- and
three-digit numbers, and two-step word problems), each group cycling through its templates.
Operands are drawn from a ``random.Random(seed)``: the same arguments give the same file, byte for
byte. Every answer is a non-negative integer, graded by ``final_numeric`` (the
number after an ``Answer:`` line when a reasoning model writes one, else the last number).

The prompts carry no instructions: how to answer (the number only, or step by step) is the pool
member's request defaults (``localpool/models.yaml``, ``members``), so one question set serves a
fast and a reasoning member of the same model.
"""

from __future__ import annotations

import argparse
import json
import random
from collections.abc import Callable
from pathlib import Path

Problem = tuple[str, int]

_NAMES = ("Ana", "Ben", "Chen", "Dara", "Eli", "Fatima", "Gus", "Hana", "Ivo", "Jun", "Kofi", "Lena")
_ITEMS = ("apples", "pencils", "stickers", "marbles", "books", "cards", "stamps", "shells")


def _quick_sum(rng: random.Random) -> Problem:
    a, b = rng.randint(10, 89), rng.randint(10, 89)
    return f"What is {a} + {b}?", a + b


def _quick_difference(rng: random.Random) -> Problem:
    a = rng.randint(30, 99)
    b = rng.randint(10, a - 5)
    return f"What is {a} - {b}?", a - b


def _quick_product(rng: random.Random) -> Problem:
    a, b = rng.randint(2, 12), rng.randint(2, 12)
    return f"What is {a} * {b}?", a * b


def _quick_count(rng: random.Random) -> Problem:
    name, item = rng.choice(_NAMES), rng.choice(_ITEMS)
    start, more = rng.randint(3, 40), rng.randint(2, 30)
    return f"{name} has {start} {item} and finds {more} more. How many {item} does {name} have?", start + more


def _expression_mul_add(rng: random.Random) -> Problem:
    a, b, c = rng.randint(12, 99), rng.randint(3, 9), rng.randint(10, 99)
    return f"What is {a} * {b} + {c}?", a * b + c


def _expression_add_sub(rng: random.Random) -> Problem:
    a, b = rng.randint(100, 999), rng.randint(100, 999)
    c = rng.randint(10, min(a + b, 999) - 1)
    return f"What is {a} + {b} - {c}?", a + b - c


def _expression_two_products(rng: random.Random) -> Problem:
    a, b, c, d = rng.randint(11, 49), rng.randint(2, 9), rng.randint(11, 49), rng.randint(2, 9)
    return f"What is {a} * {b} + {c} * {d}?", a * b + c * d


def _expression_parenthesized(rng: random.Random) -> Problem:
    a, b, c = rng.randint(11, 60), rng.randint(11, 60), rng.randint(3, 9)
    return f"What is ({a} + {b}) * {c}?", (a + b) * c


def _word_buy_groups(rng: random.Random) -> Problem:
    name, item = rng.choice(_NAMES), rng.choice(_ITEMS)
    start, groups, per = rng.randint(5, 60), rng.randint(3, 9), rng.randint(6, 25)
    text = (
        f"{name} has {start} {item}. {name} buys {groups} boxes with {per} {item} in each box. "
        f"How many {item} does {name} have now?"
    )
    return text, start + groups * per


def _word_give_away(rng: random.Random) -> Problem:
    name, item = rng.choice(_NAMES), rng.choice(_ITEMS)
    friends, each = rng.randint(3, 8), rng.randint(4, 15)
    start = friends * each + rng.randint(5, 90)
    text = (
        f"{name} had {start} {item} and gave {each} {item} to each of {friends} friends. "
        f"How many {item} does {name} have left?"
    )
    return text, start - friends * each


def _word_price(rng: random.Random) -> Problem:
    name = rng.choice(_NAMES)
    count, price, paid_extra = rng.randint(3, 12), rng.randint(4, 19), rng.randint(1, 40)
    paid = count * price + paid_extra
    text = (
        f"{name} buys {count} notebooks at {price} dollars each and pays with {paid} dollars. "
        f"How many dollars of change does {name} get?"
    )
    return text, paid - count * price


def _word_two_rates(rng: random.Random) -> Problem:
    name = rng.choice(_NAMES)
    days1, rate1 = rng.randint(2, 7), rng.randint(12, 40)
    days2, rate2 = rng.randint(2, 7), rng.randint(12, 40)
    text = (
        f"{name} reads {rate1} pages a day for {days1} days, then {rate2} pages a day for {days2} days. "
        f"How many pages does {name} read in total?"
    )
    return text, rate1 * days1 + rate2 * days2


TEMPLATES: dict[str, Callable[[random.Random], Problem]] = {
    "quick_sum": _quick_sum,
    "quick_difference": _quick_difference,
    "quick_product": _quick_product,
    "quick_count": _quick_count,
    "mul_add": _expression_mul_add,
    "add_sub": _expression_add_sub,
    "two_products": _expression_two_products,
    "parenthesized": _expression_parenthesized,
    "word_buy_groups": _word_buy_groups,
    "word_give_away": _word_give_away,
    "word_price": _word_price,
    "word_two_rates": _word_two_rates,
}


QUICK = ("quick_sum", "quick_difference", "quick_product", "quick_count")
MULTI_STEP = tuple(kind for kind in TEMPLATES if kind not in QUICK)
# The default traffic mix: two questions in three are one-step lookups a fast answer can get right;
# one in three needs several steps (docs/local-models.md measures how the payoff depends on it).
DEFAULT_QUICK_SHARE = 2 / 3


def kind_sequence(n: int, quick_share: float) -> list[str]:
    """Template names for ``n`` questions: ``quick_share`` of them one-step, spread evenly.

    Question ``i`` is one-step when ``floor((i + 1) * share)`` steps past ``floor(i * share)``, so
    every prefix of the file has the same mix; each group cycles through its templates in turn.
    """
    if not 0.0 <= quick_share <= 1.0:
        raise ValueError(f"quick share must lie in [0, 1], got {quick_share}")
    kinds: list[str] = []
    quick_count = multi_count = 0
    for index in range(n):
        if int((index + 1) * quick_share) > int(index * quick_share):
            kinds.append(QUICK[quick_count % len(QUICK)])
            quick_count += 1
        else:
            kinds.append(MULTI_STEP[multi_count % len(MULTI_STEP)])
            multi_count += 1
    return kinds


def generate(n: int, seed: int, quick_share: float = DEFAULT_QUICK_SHARE) -> list[dict[str, str]]:
    """``n`` prompt-set records (``collection.prompts`` format), deterministic for (n, seed, share)."""
    rng = random.Random(seed)
    records = []
    for index, kind in enumerate(kind_sequence(n, quick_share)):
        question, answer = TEMPLATES[kind](rng)
        records.append(
            {
                "query_id": f"arith-{seed}-{index:04d}",
                "prompt": question,
                "answer": str(answer),
                "grader": "final_numeric",
                "dataset": "arithmetic",
                "subject": kind,
            }
        )
    return records


def main(argv: list[str] | None = None) -> None:
    """Write the generated set as JSONL."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("output", type=Path)
    parser.add_argument("--n", type=int, default=300)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument(
        "--quick-share",
        type=float,
        default=DEFAULT_QUICK_SHARE,
        help="share of one-step questions (default 2/3); the rest need several steps",
    )
    args = parser.parse_args(argv)
    records = generate(args.n, args.seed, args.quick_share)
    lines = [json.dumps(record, ensure_ascii=False) for record in records]
    args.output.write_text("\n".join(lines) + "\n", encoding="utf-8")


if __name__ == "__main__":
    main()
