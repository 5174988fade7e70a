"""The ``input`` nesting limit is a constant, whatever the caller's stack depth (issue 17)."""

from __future__ import annotations

import sys

import pytest

from trio_triggers import Trigger, TriggerError
from trio_triggers._json import MAX_JSON_DEPTH, JsonValueError, copy_json, encode_json


def nested(levels: int) -> object:
    value: object = 1
    for index in range(levels):
        value = [value] if index % 2 else {"k": value}
    return value


def deep_call(frames: int, call: object) -> object:
    if frames == 0:
        return call()  # type: ignore[operator]
    return deep_call(frames - 1, call)


def test_the_limit_is_exact() -> None:
    assert MAX_JSON_DEPTH == 100
    assert copy_json(nested(MAX_JSON_DEPTH)) == nested(MAX_JSON_DEPTH)
    with pytest.raises(JsonValueError, match=r"nested too deeply \(more than 100 levels\)"):
        copy_json(nested(MAX_JSON_DEPTH + 1))


@pytest.mark.parametrize("frames", [0, 200, sys.getrecursionlimit() - 150])
def test_the_limit_does_not_depend_on_the_callers_depth(frames: int) -> None:
    ok = deep_call(frames, lambda: copy_json(nested(MAX_JSON_DEPTH)))
    assert ok == nested(MAX_JSON_DEPTH)
    assert deep_call(frames, lambda: encode_json(ok))  # type: ignore[arg-type]
    problem = deep_call(frames, lambda: _refusal(nested(MAX_JSON_DEPTH + 1)))
    assert problem == "the value is nested too deeply (more than 100 levels)"


def _refusal(value: object) -> str:
    try:
        copy_json(value)
    except JsonValueError as error:
        return error.detail
    return "accepted"


def test_a_trigger_input_at_the_limit() -> None:
    base = {"id": "t", "flow_id": "f", "cron": "0 * * * *"}
    assert Trigger.make({**base, "input": nested(MAX_JSON_DEPTH)}).input == nested(MAX_JSON_DEPTH)
    with pytest.raises(TriggerError) as info:
        Trigger.make({**base, "input": nested(MAX_JSON_DEPTH + 1)})
    assert (info.value.code, info.value.path) == ("invalid_trigger", "input")


def test_document_order_of_errors_is_kept() -> None:
    with pytest.raises(JsonValueError, match="NUL"):
        copy_json([{"a": [1, "x\x00"]}, float("nan")])
    with pytest.raises(JsonValueError, match="finite"):
        copy_json([{"a": [1, float("nan")]}, "x\x00"])
    shared: list[object] = [1]
    assert copy_json({"a": shared, "b": [shared, shared]}) == {"a": [1], "b": [[1], [1]]}
    loop: list[object] = []
    loop.append([loop])
    with pytest.raises(JsonValueError, match="contains itself"):
        copy_json(loop)
