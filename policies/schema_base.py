"""What every model of the policy file shares: strict parsing, and optional fields left out when absent."""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel, ConfigDict, SerializerFunctionWrapHandler


class StrictModel(BaseModel):
    """A model of a file people edit (the policy file, the pool manifest): unknown keys, NaN and
    infinity are errors; frozen."""

    # Unknown keys are errors: a typo in a hand-edited policy must not be silently ignored.
    # NaN and infinity are errors too (Python's json reads the literals NaN/Infinity): a NaN
    # threshold or cost compares false with everything and would break routing and budgets.
    model_config = ConfigDict(extra="forbid", frozen=True, allow_inf_nan=False)


def without_absent(
    model: BaseModel, handler: SerializerFunctionWrapHandler, optional: tuple[str, ...]
) -> dict[str, Any]:
    """The model's dump without the ``optional`` fields that are None.

    Fields added to schema version 1 after it was published are left out of the file and of the
    content hash when absent, so a policy written before them keeps its bytes and ``policy_id``.
    """
    document: dict[str, Any] = handler(model)
    for name in optional:
        if document.get(name) is None:
            document.pop(name, None)
    return document
