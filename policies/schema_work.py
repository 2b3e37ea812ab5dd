"""The work of checking an answer against a client's schema, counted and bounded; equality in linear time.

Every keyword a validator runs is charged to the ``WorkBudget`` of the check under way: one step,
plus the size of the containers it loops over (the value's items or keys, the keyword's own list or
map), so a check's time is proportional to its steps whatever the schema and the answer. A check
that would pass ``MAX_CHECK_STEPS`` stops (``OverBudget``) and the answer counts as not shown to
satisfy its schema (``policies.answer_checks``).

``uniqueItems`` and ``enum`` compare by a canonical key (``canonical``: a hashable form in which
JSON values are equal exactly when JSON Schema says so: ``1`` and ``1.0`` alike, ``true`` and ``1``
not, objects whatever their key order), so they take time linear in the value instead of
jsonschema's pairwise comparisons (quadratic in the items; the enum's size for every value).
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextvars import ContextVar
from typing import Any

from jsonschema import ValidationError

from policies.schema_limits import MAX_IN_PLACE_PATHS

# Steps one answer check may take (all its schemas together): about 60 ms at the slowest steps
# measured (bench/gateway/schema_stall.py), far above a real answer's few hundred.
MAX_CHECK_STEPS = 50_000


class OverBudget(Exception):
    """A check passed its budget of steps."""


class WorkBudget:
    """The steps an answer check may still take; ``paths``: the schema being run's in-place paths
    by subschema (``id``), what ``unevaluated*`` walk again for each value."""

    __slots__ = ("left", "paths")

    def __init__(self, steps: int = MAX_CHECK_STEPS):
        self.left = steps
        self.paths: dict[int, int] = {}

    def spend(self, steps: int) -> None:
        """Take ``steps``; OverBudget once none are left."""
        self.left -= steps
        if self.left < 0:
            raise OverBudget


# The budget of the check running in this context (None: not counted, e.g. outside a check).
_running: ContextVar[WorkBudget | None] = ContextVar("schema_work_budget", default=None)


def charge(steps: int) -> None:
    """Charge ``steps`` to the running check's budget (nothing outside a check)."""
    budget = _running.get()
    if budget is not None:
        budget.spend(steps)


def run_counted(budget: WorkBudget, check: Callable[[], Any]) -> Any:
    """``check()`` with every keyword it runs charged to ``budget`` (OverBudget past it)."""
    token = _running.set(budget)
    try:
        return check()
    finally:
        _running.reset(token)


def _size(value: Any) -> int:
    return len(value) if isinstance(value, list | dict) else 0


# What a keyword's call costs, in steps of about a microsecond (measured: bench/gateway/
# schema_stall.py). Checking a value against a subschema (jsonschema's ``descend``) costs
# ``DESCEND_STEPS``, resolving a ``$ref`` ``REF_STEPS``; a keyword is charged the descents it may
# make: one per item or key of the value (``_PER_MEMBER``), one per subschema it lists
# (``_PER_BRANCH``), or one (``_ONCE``).
DESCEND_STEPS = 12
REF_STEPS = 24
MATCH_STEPS = 5  # one RE2 search called from Python
ERROR_STEPS = 8  # one validation error, made or passed up a level
_PER_MEMBER = frozenset(
    (
        "items",
        "prefixItems",
        "additionalItems",
        "contains",
        "properties",
        "patternProperties",
        "additionalProperties",
        "propertyNames",
        "dependentSchemas",
        "dependencies",
    )
)
_PER_BRANCH = frozenset(("allOf", "anyOf", "oneOf"))
_ONCE = frozenset(("not", "if", "then", "else"))


def counted(name: str, keyword: Callable[..., Any]) -> Callable[..., Any]:
    """The jsonschema keyword function ``name`` charging the steps it may take (one, plus the sizes
    it loops over, plus its descents)."""
    if name in _PER_MEMBER:
        member, branch, once = DESCEND_STEPS + 1, 1, 1
    elif name in _PER_BRANCH:
        member, branch, once = 1, DESCEND_STEPS + 1, 1
    elif name in _ONCE or name == "$ref":
        member, branch, once = 1, 1, DESCEND_STEPS + (REF_STEPS if name == "$ref" else 0)
    else:
        member, branch, once = 1, 0 if name == "enum" else 1, 1

    def run(validator: Any, value: Any, instance: Any, schema: Any) -> Any:
        charge(once + member * _size(instance) + branch * _size(value))
        errors = keyword(validator, value, instance, schema)
        return None if errors is None else _charged_errors(errors)

    return run


def _charged_errors(errors: Any) -> Iterator[ValidationError]:
    """``errors``, each charged ``ERROR_STEPS`` where it passes (an error is made, then completed at
    every level it rises through; ``anyOf`` and ``oneOf`` make all of their branches')."""
    for error in errors:
        charge(ERROR_STEPS)
        yield error


def counted_unevaluated(keyword: Callable[..., Any]) -> Callable[..., Any]:
    """``unevaluatedItems``/``unevaluatedProperties``: they walk every in-place path of their
    subschema again for each item or key, so they are charged that product."""

    def run(validator: Any, value: Any, instance: Any, schema: Any) -> Any:
        budget = _running.get()
        if budget is not None:
            budget.spend(2 * (1 + _size(instance)) * budget.paths.get(id(schema), MAX_IN_PLACE_PATHS))
        return keyword(validator, value, instance, schema)

    return run


# --- canonical keys: JSON Schema equality by hashing ---------------------------------------------


def canonical(value: Any) -> Any:
    """A hashable key equal for two JSON values exactly when JSON Schema calls them equal (charged
    two steps per value inside)."""
    charge(2)
    if isinstance(value, bool) or value is None:
        return ("b", value)  # apart from numbers: True == 1 in Python, never in JSON Schema
    if isinstance(value, int | float):
        return ("n", value)  # 1 == 1.0 and hash(1) == hash(1.0): one key
    if isinstance(value, str):
        return ("s", value)
    if isinstance(value, list):
        return ("a", tuple(canonical(item) for item in value))
    if isinstance(value, dict):
        return ("o", frozenset((key, canonical(item)) for key, item in value.items()))
    return ("?", id(value))  # not JSON: equal only to itself


class HashedEnum(list[Any]):
    """An ``enum``'s values with the set of their canonical keys (made once, when compiled)."""

    def __init__(self, values: list[Any]):
        super().__init__(values)
        self.keys = frozenset(canonical(value) for value in values)


def enum(validator: Any, values: Any, instance: Any, schema: Any) -> Iterator[ValidationError]:
    """``enum`` by hashing: one lookup whatever the enum's size."""
    keys = values.keys if isinstance(values, HashedEnum) else HashedEnum(values).keys
    if canonical(instance) not in keys:
        yield ValidationError(f"{_shown(instance)} is not one of {_shown(values[:20])}")


def unique_items(validator: Any, unique: Any, instance: Any, schema: Any) -> Iterator[ValidationError]:
    """``uniqueItems`` by hashing: linear in the items instead of comparing every pair."""
    if not unique or not validator.is_type(instance, "array"):
        return
    seen: set[Any] = set()
    for index, item in enumerate(instance):
        key = canonical(item)
        if key in seen:
            yield ValidationError(f"item {index} ({_shown(item)}) repeats an earlier item (uniqueItems)")
            return
        seen.add(key)


def _shown(value: Any) -> str:
    return repr(value)[:80]  # a value is shown cut: an error is one bounded line
