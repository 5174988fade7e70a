"""Declarations (§2): decoding, defaults, error codes, paths and messages."""

from __future__ import annotations

from collections.abc import Iterator, Mapping

import pytest

from trio_triggers import RegisteredTrigger, Schedule, Trigger, TriggerError

BASE: dict[str, object] = {"id": "nightly", "flow_id": "flow", "input": {}, "cron": "0 0 * * *"}


def test_trigger_defaults() -> None:
    trigger = Trigger.make(
        {
            "id": "nightly",
            "flow_id": "flow",
            "input": {"ok": True},
            "cron": "0 0 * * *",
            "max_catch_up": 2,
            "unknown": object(),
        }
    )
    assert trigger == Trigger(
        id="nightly", flow_id="flow", input={"ok": True}, cron="0 0 * * *", max_catch_up=2
    )
    assert (trigger.overlap, trigger.catch_up, trigger.enabled) == ("skip", "none", True)
    assert trigger.timezone is None


def test_schedule_defaults() -> None:
    schedule = Schedule.make({"cron": "0 0 * * *", "max_catch_up": 2})
    assert schedule == Schedule(cron="0 0 * * *", max_catch_up=2)
    assert Schedule.make({"cron": "0 0 * * *"}).max_catch_up == 0


def test_input_is_deep_copied() -> None:
    payload = {"nested": [1, 2]}
    trigger = Trigger.make({**BASE, "input": payload})
    payload["nested"].append(3)
    assert trigger.input == {"nested": [1, 2]}


def test_null_input_is_allowed_but_required() -> None:
    assert Trigger.make({**BASE, "input": None}).input is None
    without = {k: v for k, v in BASE.items() if k != "input"}
    with pytest.raises(TriggerError) as info:
        Trigger.make(without)
    assert (info.value.code, info.value.path) == ("invalid_trigger", "input")


def test_make_accepts_an_existing_trigger() -> None:
    trigger = Trigger.make({**BASE, "overlap": "supersede", "timezone": "UTC"})
    assert Trigger.make(trigger) == trigger
    registered = RegisteredTrigger.of(trigger, revision=3, last_fired_at=7)
    again = Trigger.make(registered)
    assert type(again) is Trigger
    assert again == trigger
    assert registered.declaration == trigger
    assert registered.schedule == Schedule(cron="0 0 * * *", timezone="UTC", overlap="supersede")
    assert Schedule.make(trigger) == trigger.schedule


def test_whitespace_only_strings_are_accepted() -> None:
    assert Trigger.make({**BASE, "id": " ", "flow_id": "\t"}).id == " "


@pytest.mark.parametrize(
    ("patch", "path"),
    [
        ({"id": ""}, "id"),
        ({"id": 1}, "id"),
        ({"id": None}, "id"),
        ({"id": "a\x00b"}, "id"),
        ({"flow_id": ""}, "flow_id"),
        ({"flow_id": "\x00"}, "flow_id"),
        ({"input": {"k": "v\x00"}}, "input"),
        ({"input": {"deep": [[{"x": float("nan")}]]}}, "input"),
        ({"input": (1,)}, "input"),
        ({"cron": ""}, "cron"),
        ({"cron": 42}, "cron"),
        ({"cron": "0 0 * * *\x00"}, "cron"),
        ({"timezone": ""}, "timezone"),
        ({"timezone": 5}, "timezone"),
        ({"timezone": "UTC\x00"}, "timezone"),
        ({"overlap": "buffer"}, "overlap"),
        ({"overlap": None}, "overlap"),
        ({"catch_up": "always"}, "catch_up"),
        ({"max_catch_up": 1001}, "max_catch_up"),
        ({"max_catch_up": -1}, "max_catch_up"),
        ({"max_catch_up": True}, "max_catch_up"),
        ({"max_catch_up": 1.0}, "max_catch_up"),
        ({"enabled": 1}, "enabled"),
        ({"enabled": None}, "enabled"),
    ],
)
def test_trigger_field_errors(patch: dict[str, object], path: str) -> None:
    with pytest.raises(TriggerError) as info:
        Trigger.make({**BASE, **patch})
    error = info.value
    assert error.code == "invalid_trigger"
    assert error.path == path
    assert error.message.startswith(f"Trigger declaration is invalid at {path}: ")
    assert str(error) == error.message
    assert isinstance(error.__cause__, Exception)
    assert str(error.__cause__) == error.message.split(": ", 1)[1]


def test_empty_id_example() -> None:
    with pytest.raises(TriggerError) as info:
        Trigger.make({"id": "", "flow_id": "f", "input": {}, "cron": "0 * * * *"})
    assert info.value.code == "invalid_trigger"
    assert info.value.path == "id"
    assert info.value.message.startswith("Trigger declaration is invalid at id")


def test_first_failing_field_wins() -> None:
    with pytest.raises(TriggerError) as info:
        Trigger.make({"id": "", "flow_id": "", "input": {}, "cron": ""})
    assert info.value.path == "id"
    with pytest.raises(TriggerError) as info:
        Trigger.make({})
    assert (info.value.code, info.value.path) == ("invalid_trigger", "id")


def test_max_catch_up_bound() -> None:
    assert Trigger.make({**BASE, "max_catch_up": 1000}).max_catch_up == 1000
    with pytest.raises(TriggerError) as info:
        Trigger.make({**BASE, "max_catch_up": 1001})
    assert (info.value.code, info.value.path) == ("invalid_trigger", "max_catch_up")


def test_schedule_errors() -> None:
    with pytest.raises(TriggerError) as info:
        Schedule.make({"cron": "", "max_catch_up": -1})
    assert info.value.code == "invalid_schedule"
    assert info.value.path == "cron"
    assert info.value.message.startswith("Schedule declaration is invalid at cron: ")


@pytest.mark.parametrize("value", [None, 42, "0 * * * *", ["cron"], b"x"])
def test_not_a_mapping(value: object) -> None:
    with pytest.raises(TriggerError) as info:
        Trigger.make(value)
    assert info.value.code == "invalid_trigger"
    assert info.value.path is None
    assert info.value.message.startswith("Trigger declaration is invalid: ")


class Exploding(Mapping[str, object]):
    def __init__(self, text: str) -> None:
        self.text = text

    def __getitem__(self, key: str) -> object:
        raise Exception(self.text)

    def __contains__(self, key: object) -> bool:
        return True

    def __iter__(self) -> Iterator[str]:
        return iter(())

    def __len__(self) -> int:
        return 0


def test_other_exception_while_decoding() -> None:
    with pytest.raises(TriggerError) as info:
        Schedule.make(Exploding("boom"))
    assert info.value.code == "invalid_schedule"
    assert info.value.path is None
    assert info.value.message == "Schedule declaration is invalid: Exception: boom"
    assert str(info.value.__cause__) == "Exception: boom"
    assert info.value.__suppress_context__


def test_other_exception_detail_is_one_bounded_line() -> None:
    with pytest.raises(TriggerError) as info:
        Trigger.make(Exploding("line one\nline two\r\n" + "x" * 2000))
    message = info.value.message
    assert "\n" not in message
    assert "\r" not in message
    detail = message.removeprefix("Trigger declaration is invalid: ")
    assert detail.startswith("Exception: line one line two ")
    assert len(detail) == 512


SECRET = "sk-live-do-not-log"


@pytest.mark.parametrize(
    "declaration",
    [
        {"id": "t", "flow_id": "f", "cron": 42, "input": {"token": SECRET}},
        {"id": "t", "flow_id": "f", "cron": "0 * * * *", "input": {"token": SECRET, "n": {1}}},
        {"id": SECRET + "\x00", "flow_id": "f", "cron": "0 * * * *", "input": None},
        {"id": "t", "flow_id": "f", "cron": "0 * * * *", "input": None, "overlap": SECRET},
        {"id": "t", "flow_id": "f", "cron": "0 * * * *", "input": {SECRET: float("inf")}},
    ],
)
def test_secret_never_reaches_the_message(declaration: dict[str, object]) -> None:
    with pytest.raises(TriggerError) as info:
        Trigger.make(declaration)
    error = info.value
    for text in (error.message, str(error.__cause__), repr(error.__cause__)):
        assert SECRET not in text
        assert "\n" not in text
        assert len(text) < 512 + 60
