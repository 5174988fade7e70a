"""JSON values (§2.4) and durations (§1.2)."""

from __future__ import annotations

import datetime
import decimal
import enum
import math
from collections import OrderedDict

import pytest

from trio_triggers import TriggerError
from trio_triggers._durations import duration_ms
from trio_triggers._json import (
    JsonValue,
    JsonValueError,
    checked_input,
    copy_json,
    decode_json,
    encode_input,
    encode_json,
    json_problem,
)


class Colour(enum.IntEnum):
    RED = 1


def test_copy_is_deep_and_keeps_order() -> None:
    original = {"b": [1, {"x": None}], "a": 1.5, "c": True}
    copied = copy_json(original)
    assert copied == original
    assert isinstance(copied, dict)
    assert list(copied) == ["b", "a", "c"]
    original["b"][1]["x"] = "changed"  # type: ignore[index]
    assert copied == {"b": [1, {"x": None}], "a": 1.5, "c": True}


def test_subclasses_become_plain() -> None:
    copied = copy_json(OrderedDict(a=Colour.RED))
    assert type(copied) is dict
    assert type(copied["a"]) is int


def _cyclic() -> object:
    items: list[object] = []
    items.append(items)
    return items


@pytest.mark.parametrize(
    "value",
    [
        math.nan,
        math.inf,
        -math.inf,
        (1, 2),
        {1, 2},
        b"bytes",
        datetime.date(2026, 1, 1),
        datetime.datetime(2026, 1, 1),
        decimal.Decimal("1.5"),
        print,
        object(),
        {1: "x"},
        {"a": [1, {"b": math.nan}]},
        "nul\x00",
        {"nul\x00": 1},
        _cyclic(),
    ],
)
def test_refused(value: object) -> None:
    assert json_problem(value) is not None
    with pytest.raises(JsonValueError):
        copy_json(value)
    with pytest.raises(TriggerError) as info:
        checked_input({"wrapped": [value]})
    assert info.value.code == "invalid_trigger"
    assert info.value.path == "input"
    assert info.value.message.startswith("Trigger declaration is invalid at input: ")


def test_shared_but_acyclic_is_fine() -> None:
    shared = [1]
    assert copy_json({"a": shared, "b": shared}) == {"a": [1], "b": [1]}


def test_deep_nesting_is_a_typed_error() -> None:
    value: object = 1
    for _ in range(100_000):
        value = [value]
    with pytest.raises(JsonValueError, match="nested too deeply"):
        copy_json(value)


def test_encode_round_trip() -> None:
    value: JsonValue = {"z": 1, "a": [1.5, -0.0, 10**30, "é\u2028"], "m": {"k": None}}
    text = encode_json(value)
    assert " " not in text
    assert text.startswith('{"z":1,"a":')
    back = decode_json(text)
    assert back == value
    assert isinstance(back, dict)
    assert list(back) == ["z", "a", "m"]


def test_encode_input_without_json_text() -> None:
    with pytest.raises(TriggerError) as info:
        encode_input({"x": "\ud800"})
    assert info.value.code == "invalid_trigger"
    assert info.value.message == "trigger input has no JSON representation"
    assert info.value.path == "input"


@pytest.mark.parametrize(
    ("value", "expected"),
    [
        (1, 1000),
        (0.5, 500),
        (0.0004, 1),
        (0.0005, 1),  # rounds to 0 (half to even) but is positive
        (0.0015, 2),
        (60, 60_000),
        (datetime.timedelta(seconds=1), 1000),
        (datetime.timedelta(microseconds=1), 1),
        (datetime.timedelta(microseconds=1500), 2),
        (datetime.timedelta(microseconds=2500), 2),
        (datetime.timedelta(days=30), 2_592_000_000),
        (9_007_199_254_740, 9_007_199_254_740_000),
    ],
)
def test_duration_ms(value: object, expected: int) -> None:
    assert duration_ms("poll_interval", value) == expected


@pytest.mark.parametrize("value", ["1", None, True, False, [1], decimal.Decimal(1)])
def test_duration_wrong_type(value: object) -> None:
    with pytest.raises(TriggerError) as info:
        duration_ms("poll_interval", value)
    assert info.value.code == "invalid_options"
    assert info.value.path == "poll_interval"
    assert info.value.message == "poll_interval must be a valid duration"


@pytest.mark.parametrize(
    "value",
    [
        0,
        -1,
        0.0,
        -0.5,
        math.nan,
        math.inf,
        -math.inf,
        1e308,
        2**53,
        datetime.timedelta(0),
        datetime.timedelta(seconds=-1),
        datetime.timedelta(days=999_999_999),
    ],
)
def test_duration_not_positive(value: object) -> None:
    with pytest.raises(TriggerError) as info:
        duration_ms("start_timeout", value)
    assert info.value.code == "invalid_options"
    assert info.value.path == "start_timeout"
    assert info.value.message == "start_timeout must be a finite positive duration"
