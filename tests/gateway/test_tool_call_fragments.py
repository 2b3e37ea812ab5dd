"""Streamed tool-call fragments are joined one way for the answer check and both translated streams."""

from __future__ import annotations

from gateway.wire.tool_call_fragments import ToolCallFragments


def fragment(index: object, call_id: str | None = None, name: str = "", arguments: str = "") -> dict:
    """One ``delta.tool_calls[]`` entry."""
    return {"index": index, "id": call_id, "function": {"name": name, "arguments": arguments}}


def test_id_and_name_come_from_the_first_fragment_that_has_them_and_arguments_are_joined() -> None:
    calls = ToolCallFragments()
    first, piece = calls.add(fragment(0, ""))
    assert (first.call_id, first.name, piece) == (None, "", "")
    assert calls.add(fragment(0, "call_1", "get_weather", '{"ci'))[1] == '{"ci'
    assert calls.add(fragment(0, "call_2", "other", 'ty": "Paris"}'))[1] == 'ty": "Paris"}'
    function = {"name": "get_weather", "arguments": '{"city": "Paris"}'}
    assert calls.as_chat() == [{"id": "call_1", "type": "function", "function": function}]


def test_calls_are_kept_per_index_in_index_order() -> None:
    calls = ToolCallFragments()
    assert not calls
    calls.add(fragment(1, "b", "second", "{}"))
    calls.add(fragment(0, "a", "first", "{}"))
    calls.add(fragment(True, arguments="x"))  # not an integer index: call 0
    calls.add({"index": 0, "function": "not an object"})  # nothing to add
    joined = [(call.index, call.name, call.arguments) for call in calls]
    assert joined == [(0, "first", "{}x"), (1, "second", "{}")]
