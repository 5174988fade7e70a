"""Findings of the outside check of the cron layer (issue 17, item 2), one test each."""

from __future__ import annotations

import pytest

from trio_triggers import Cron, Trigger, TriggerError, idempotency_key, iso
from trio_triggers._cron import _MAX_WALL, _MIN_WALL

from ._util import z


@pytest.mark.parametrize(
    "zone",
    [
        "localtime",
        "posixrules",
        "Factory",
        "right/UTC",
        "right/America/New_York",
        "posix/UTC",
        "posix/Europe/Berlin",
    ],
)
def test_host_dependent_zone_names_are_refused(zone: str) -> None:
    with pytest.raises(TriggerError) as info:
        Cron.parse("0 * * * *", zone)
    assert (info.value.code, info.value.path) == ("invalid_cron", "timezone")
    assert info.value.message == "Invalid time zone in cron expression"
    with pytest.raises(TriggerError) as info:
        Trigger.make(
            {"id": "t", "flow_id": "f", "input": None, "cron": "0 * * * *", "timezone": zone}
        )
    assert (info.value.code, info.value.path) == ("invalid_cron", "timezone")


@pytest.mark.parametrize("zone", ["UTC", "Etc/UTC", "America/New_York", "+05:30"])
def test_ordinary_zones_still_parse(zone: str) -> None:
    assert Cron.parse("0 * * * *", zone).timezone == zone


@pytest.mark.parametrize("field", ["id", "flow_id"])
def test_a_lone_surrogate_is_refused_at_the_declaration(field: str) -> None:
    declaration: dict[str, object] = {"id": "t", "flow_id": "f", "input": None, "cron": "0 * * * *"}
    declaration[field] = "bad\ud800name"
    with pytest.raises(TriggerError) as info:
        Trigger.make(declaration)
    assert (info.value.code, info.value.path) == ("invalid_trigger", field)
    assert info.value.message.endswith(f"at {field}: must not contain lone surrogates")
    assert "\ud800" not in info.value.message


def test_non_ascii_identifiers_are_still_fine() -> None:
    trigger = Trigger.make({"id": "été", "flow_id": "流れ", "input": None, "cron": "0 * * * *"})
    assert (trigger.id, trigger.flow_id) == ("été", "流れ")


@pytest.mark.parametrize("zone", ["America/New_York", "-05:00", "Pacific/Kiritimati", "UTC"])
def test_no_occurrence_past_9999(zone: str) -> None:
    """Every operation agrees: an instant in year 10000 is not an occurrence."""
    cron = Cron.parse("* * * * *", zone)
    with pytest.raises(TriggerError, match="has no next occurrence"):
        cron.next(253_402_300_799_000)  # 9999-12-31T23:59:59Z
    last = cron.previous_at_or_before(_MAX_WALL + 86_400_000)  # a day past the calendar
    assert last <= _MAX_WALL
    assert idempotency_key("t", last).startswith("t:9999-12-31T")
    with pytest.raises(TriggerError, match="has no next occurrence"):
        cron.next(last)
    assert cron.occurrences_between(last - 7_200_000, last - 3_600_000)[-1] == last - 3_600_000
    # Past the last occurrence the interval search runs off the calendar, as at any edge.
    with pytest.raises(TriggerError, match="has no interval occurrence"):
        cron.occurrences_between(last - 3_600_000, _MAX_WALL + 86_400_000)


def test_past_9999_in_new_york_is_no_next_occurrence() -> None:
    cron = Cron.parse("* * * * *", "America/New_York")
    # 18:59 on 31 December 9999 is the last wall minute whose instant (23:59Z) is in 9999;
    # the wall minutes after it (up to 23:59 local) would be instants in year 10000.
    assert cron.next(z("9999-12-31T23:58:00Z")) == z("9999-12-31T23:59:00Z")
    with pytest.raises(TriggerError, match="has no next occurrence"):
        cron.next(z("9999-12-31T23:59:00Z"))


@pytest.mark.parametrize(
    ("zone", "first"),
    [
        ("Asia/Tokyo", "0001-01-01T00:41:01Z"),  # local mean time, +09:18:59
        ("+14:00", "0001-01-01T00:00:00Z"),
        ("America/New_York", "0001-01-01T04:56:02Z"),
    ],
)
def test_no_occurrence_before_year_1(zone: str, first: str) -> None:
    cron = Cron.parse("0 * * * *", zone)
    assert cron.next(_MIN_WALL - 86_400_000) == z(first)
    assert cron.previous_at_or_before(z(first)) == z(first)
    with pytest.raises(TriggerError, match="has no previous occurrence"):
        cron.previous_at_or_before(z(first) - 1000)


@pytest.mark.parametrize(
    ("cron", "tools"),
    [
        ("0 0 1-31 * 1", "croniter and Vixie cron"),
        ("0 0 13 * 0-6", "croniter and Vixie cron"),
        ("0 0 */1 * 5", "croniter"),
        ("0 0 */2 * 1", "Vixie cron"),
        ("0 0 0 */2 * 1", "Vixie cron"),
    ],
)
def test_a_day_rule_that_differs_from_classic_crons_warns(cron: str, tools: str) -> None:
    with pytest.warns(UserWarning, match=f"combine differently in {tools} ") as caught:
        Trigger.make({"id": "t", "flow_id": "f", "input": None, "cron": cron})
    assert caught[0].filename == __file__  # pointed at the declaration, not the library


@pytest.mark.parametrize(
    "cron", ["0 0 13 * 5", "0 0 * * 1", "0 9 * * 1-5", "0 0 1-31 * 0-6", "0 0 */2 * *", "0 0 1 * *"]
)
def test_the_usual_spellings_do_not_warn(cron: str) -> None:
    Trigger.make({"id": "t", "flow_id": "f", "input": None, "cron": cron})  # warnings are errors


def test_the_day_rule_table_of_the_docs() -> None:
    """docs/cron.md's table, our column (croniter's column was measured by running it)."""
    start = z("2027-02-28T00:00Z")

    def days(cron: str) -> list[int]:
        found = Cron.parse(cron, "UTC").occurrences_between(start, start + 35 * 86_400_000)
        return [int(iso(o)[8:10]) for o in found]

    mondays = [1, 8, 15, 22, 29]
    assert days("0 0 1-31 * 1") == mondays
    assert days("0 0 13 * 0-6") == [13]
    assert days("0 0 */1 * 5") == [5, 12, 19, 26, 2]
    odd_or_monday = [*sorted(set(range(1, 32, 2)) | set(mondays)), 1, 3]
    assert days("0 0 */2 * 1") == odd_or_monday
