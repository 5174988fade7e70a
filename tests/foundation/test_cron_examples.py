"""The worked cron examples of triggers.md §4.5-§4.7, and the §4.1/§15 parse errors."""

from __future__ import annotations

import itertools
import math

import pytest

from trio_triggers import Cron, TriggerError, idempotency_key

from ._util import MIN, D, H, z, z26

LA = "America/Los_Angeles"
NY = "America/New_York"
SPRING = (z26("02-26T00:00Z"), z26("03-21T00:00Z"))
FALL = (z26("10-22T00:00Z"), z26("11-14T00:00Z"))
FALL_EVENING = (z26("10-22T00:00Z"), z26("11-15T00:00Z"))

ROWS: list[tuple[str, str, tuple[int, int], list[str]]] = [
    (LA, "0 9 * * 5", SPRING, ["02-27T17:00Z", "03-06T17:00Z", "03-13T16:00Z", "03-20T16:00Z"]),
    (LA, "0 9 * * 5", FALL, ["10-23T16:00Z", "10-30T16:00Z", "11-06T17:00Z", "11-13T17:00Z"]),
    (
        LA,
        "30 2 * * *",
        (z26("03-06T00:00Z"), z26("03-10T00:00Z")),
        ["03-06T10:30Z", "03-07T10:30Z", "03-08T10:30Z", "03-09T09:30Z"],
    ),
    (
        LA,
        "30 1 * * *",
        (z26("10-30T00:00Z"), z26("11-03T00:00Z")),
        ["10-30T08:30Z", "10-31T08:30Z", "11-01T08:30Z", "11-02T09:30Z"],
    ),
    (LA, "30 16 * * 5", SPRING, ["02-28T00:30Z", "03-07T00:30Z", "03-13T23:30Z", "03-20T23:30Z"]),
    (
        LA,
        "30 16 * * 5",
        FALL_EVENING,
        ["10-23T23:30Z", "10-30T23:30Z", "11-07T00:30Z", "11-14T00:30Z"],
    ),
    (NY, "0 9 * * 5", SPRING, ["02-27T14:00Z", "03-06T14:00Z", "03-13T13:00Z", "03-20T13:00Z"]),
    (NY, "0 9 * * 5", FALL, ["10-23T13:00Z", "10-30T13:00Z", "11-06T14:00Z", "11-13T14:00Z"]),
    (
        NY,
        "30 2 * * *",
        (z26("03-06T00:00Z"), z26("03-10T00:00Z")),
        ["03-06T07:30Z", "03-07T07:30Z", "03-08T07:30Z", "03-09T06:30Z"],
    ),
    (
        NY,
        "30 1 * * *",
        (z26("10-30T00:00Z"), z26("11-03T00:00Z")),
        ["10-30T05:30Z", "10-31T05:30Z", "11-01T05:30Z", "11-02T06:30Z"],
    ),
    (NY, "30 19 * * 5", SPRING, ["02-28T00:30Z", "03-07T00:30Z", "03-13T23:30Z", "03-20T23:30Z"]),
    (
        NY,
        "30 19 * * 5",
        FALL_EVENING,
        ["10-23T23:30Z", "10-30T23:30Z", "11-07T00:30Z", "11-14T00:30Z"],
    ),
]


def _check_row(cron: Cron, window: tuple[int, int], expected: list[int]) -> None:
    assert cron.occurrences_between(*window) == expected
    after = 45 * MIN if cron.expression.startswith("30 16") else 37 * MIN + 457
    if cron.expression.startswith("30 19"):
        after = 45 * MIN
    for index, occurrence in enumerate(expected):
        assert cron.previous_at_or_before(occurrence) == occurrence
        assert cron.previous_at_or_before(occurrence + after) == occurrence
        if index + 1 < len(expected):
            assert cron.next(occurrence) == expected[index + 1]


@pytest.mark.parametrize(("zone", "expression", "window", "expected"), ROWS)
def test_dst_rows(zone: str, expression: str, window: tuple[int, int], expected: list[str]) -> None:
    _check_row(Cron.parse(expression, zone), window, [z26(text) for text in expected])


@pytest.mark.parametrize(
    ("expression", "window", "expected"),
    [row[1:] for row in ROWS if row[0] == LA],
)
def test_absent_zone_follows_the_host_zone(
    monkeypatch: pytest.MonkeyPatch, expression: str, window: tuple[int, int], expected: list[str]
) -> None:
    monkeypatch.setenv("TZ", LA)
    cron = Cron.parse(expression)
    assert cron.timezone is None
    _check_row(cron, window, [z26(text) for text in expected])


def test_host_zone_is_resolved_on_every_call(monkeypatch: pytest.MonkeyPatch) -> None:
    cron = Cron.parse("0 9 * * *")
    monkeypatch.setenv("TZ", NY)
    assert cron.next(z("2026-01-01T13:00Z")) == z("2026-01-01T14:00Z")
    monkeypatch.setenv("TZ", ":" + LA)  # a leading ':' is ignored
    assert cron.next(z("2026-01-01T13:00Z")) == z("2026-01-01T17:00Z")
    monkeypatch.setenv("TZ", "UTC")
    assert cron.next(z("2026-01-01T08:00Z")) == z("2026-01-01T09:00Z")


def test_unknown_tz_falls_back_to_the_system_zone(monkeypatch: pytest.MonkeyPatch) -> None:
    from trio_triggers import host_timezone

    monkeypatch.delenv("TZ", raising=False)
    system = host_timezone()
    monkeypatch.setenv("TZ", "Not/AZone")
    assert host_timezone() == system
    monkeypatch.setenv("TZ", "+02:00")  # TZ must name an IANA key
    assert host_timezone() == system
    monkeypatch.setenv("TZ", "Australia/Lord_Howe")
    assert host_timezone() == "Australia/Lord_Howe"


@pytest.mark.parametrize("host", ["UTC", LA, "Asia/Kolkata"])
def test_utc_ignores_the_host_zone(monkeypatch: pytest.MonkeyPatch, host: str) -> None:
    monkeypatch.setenv("TZ", host)
    cron = Cron.parse("30 9 * * *", "UTC")
    assert cron.previous_at_or_before(z("2026-11-01T09:30:00.457Z")) == z("2026-11-01T09:30Z")


def test_hourly_spring_forward() -> None:
    cron = Cron.parse("30 * * * *", LA)
    found = cron.occurrences_between(z26("03-08T00:00Z"), z26("03-08T16:00Z"))
    assert len(found) == 16
    assert found[0] == z26("03-08T00:30Z")
    assert all(b - a == H for a, b in itertools.pairwise(found))
    # 02:30 local would be 10:30Z on PST; 10:30Z reads 03:30 PDT. No instant reads 02:30.
    local = [(o - 8 * H) if o < z26("03-08T10:00Z") else (o - 7 * H) for o in found]
    assert all((value // H) % 24 != 2 for value in local)
    for occurrence in found:
        assert cron.previous_at_or_before(occurrence + 29 * MIN) == occurrence


def test_hourly_fall_back_fires_both_passes() -> None:
    cron = Cron.parse("30 * * * *", LA)
    found = cron.occurrences_between(z26("11-01T00:00Z"), z26("11-01T16:00Z"))
    assert len(found) == 16
    assert all(b - a == H for a, b in itertools.pairwise(found))
    assert z26("11-01T08:30Z") in found
    assert z26("11-01T09:30Z") in found
    local = [(o - 7 * H) if o < z26("11-01T09:00Z") else (o - 8 * H) for o in found]
    assert sum(1 for value in local if value % D == H + 30 * MIN) == 2
    for occurrence in found:
        assert cron.previous_at_or_before(occurrence + 29 * MIN) == occurrence


def test_around_the_gap() -> None:
    cron = Cron.parse("30 2 * * *", LA)
    assert cron.previous_at_or_before(z26("03-08T10:30Z")) == z26("03-08T10:30Z")
    assert cron.previous_at_or_before(z26("03-08T12:00:00.457Z")) == z26("03-08T10:30Z")
    assert cron.previous_at_or_before(z26("03-08T10:00Z")) == z26("03-07T10:30Z")
    assert cron.previous_at_or_before(z26("03-09T09:30Z")) == z26("03-09T09:30Z")
    assert cron.next(z26("03-07T10:30Z")) == z26("03-08T10:30Z")


def test_around_the_repeat() -> None:
    cron = Cron.parse("30 1 * * *", LA)
    assert cron.previous_at_or_before(z26("11-01T09:30Z")) == z26("11-01T08:30Z")
    assert cron.next(z26("11-01T09:00Z")) == z26("11-02T09:30Z")
    assert cron.next(z26("11-01T08:30Z")) == z26("11-02T09:30Z")
    found = cron.occurrences_between(z26("10-30T00:00Z"), z26("11-03T00:00Z"))
    assert z26("11-01T09:30Z") not in found
    ny = Cron.parse("30 1 * * *", NY)
    assert ny.previous_at_or_before(z26("11-01T06:30Z")) == z26("11-01T05:30Z")
    assert ny.next(z26("11-01T06:00Z")) == z26("11-02T06:30Z")


def test_keys_are_stable() -> None:
    cron = Cron.parse("0 9 * * 5", LA)
    found = cron.occurrences_between(*SPRING)
    keys = [idempotency_key("weekly-review", o) for o in found]
    assert len(set(keys)) == 4
    assert keys[2] == "weekly-review:2026-03-13T16:00:00.000Z"
    again = Cron.parse("0 9 * * 5", LA).occurrences_between(SPRING[0] + 5 * H + 3 * MIN, SPRING[1])
    assert again == found


# --- §4.5 non-DST examples ---------------------------------------------------------------


def test_new_york_morning() -> None:
    cron = Cron.parse("0 9 * * *", NY)
    assert cron.next(z("2026-01-01T13:00Z")) == z("2026-01-01T14:00Z")


def test_hourly_utc() -> None:
    cron = Cron.parse("0 * * * *", "UTC")
    start = z("2026-01-01T00:00Z")
    assert cron.occurrences_between(start, start + 2 * H) == [start + H, start + 2 * H]
    assert cron.previous_at_or_before(H) == H
    assert cron.previous_at_or_before(H + 37 * MIN + 457) == H
    assert cron.previous_at_or_before(H - 1) == 0


def test_every_minute_bounds() -> None:
    cron = Cron.parse("* * * * *", "UTC")
    start = z("2026-01-01T00:00Z")
    assert len(cron.occurrences_between(start, start + 1000 * MIN)) == 1000
    for end in (start + 1001 * MIN, start + D):
        with pytest.raises(TriggerError) as info:
            cron.occurrences_between(start, end)
        assert info.value.code == "catch_up_bound_exceeded"
        assert info.value.message == (
            "interval contains more than 1000 occurrences; MAX_OCCURRENCES is 1000"
        )
    assert cron.occurrences_between(start, start + D, limit=2) == [start + MIN, start + 2 * MIN]
    assert cron.occurrences_between(start, start + D, limit=0) == []
    assert len(cron.occurrences_between(start, start + D, limit=1500)) == 1440


@pytest.mark.parametrize(
    ("limit", "shown"),
    [(-1, "-1"), (1.5, "1.5"), (math.nan, "nan"), (math.inf, "inf"), (True, "True"), (2**53, None)],
)
def test_bad_limits(limit: object, shown: str | None) -> None:
    cron = Cron.parse("* * * * *", "UTC")
    with pytest.raises(TriggerError) as info:
        cron.occurrences_between(0, D, limit=limit)  # type: ignore[arg-type]
    assert info.value.code == "invalid_options"
    assert info.value.path == "limit"
    assert info.value.message.startswith(
        "occurrence limit must be a non-negative safe integer, received "
    )
    if shown is not None:
        assert info.value.message.endswith(f"received {shown}")


def test_fixed_offset() -> None:
    cron = Cron.parse("30 2 * * *", "+02:00")
    assert cron.occurrences_between(z("2026-03-07T00:00Z"), z("2026-03-09T00:00Z")) == [
        z("2026-03-07T00:30Z"),
        z("2026-03-08T00:30Z"),
    ]
    assert cron.previous_at_or_before(z("2026-03-08T00:30:59.999Z")) == z("2026-03-08T00:30Z")
    west = Cron.parse("0 0 * * *", "-09:30")
    assert west.next(z("2026-01-01T00:00Z")) == z("2026-01-01T09:30Z")


def test_six_fields() -> None:
    cron = Cron.parse("*/15 * * * * *", "UTC")
    assert cron.has_seconds
    assert cron.occurrences_between(0, MIN) == [15_000, 30_000, 45_000, 60_000]
    assert cron.previous_at_or_before(44_999) == 30_000
    assert cron.next(-1) == 0


def test_whole_seconds() -> None:
    cron = Cron.parse("* * * * * *", "UTC")
    assert cron.next(1_500) == 2_000
    assert cron.previous_at_or_before(1_999) == 1_000
    assert cron.previous_at_or_before(-1) == -1_000


def test_cron_object() -> None:
    cron = Cron.parse("0 9 * * 1-5", NY)
    assert (cron.expression, cron.timezone) == ("0 9 * * 1-5", NY)
    assert cron == Cron.parse("0 9 * * 1-5", NY)
    assert hash(cron) == hash(Cron.parse("0 9 * * 1-5", NY))
    assert cron != Cron.parse("0 9 * * 1-5", LA)
    with pytest.raises(AttributeError):
        cron.expression = "x"  # type: ignore[misc]
    with pytest.raises(TypeError):
        Cron()


# --- parsing (§4.1) ----------------------------------------------------------------------


@pytest.mark.parametrize(
    "expression",
    [
        "0 9 * * mon-fri",
        "0 9 * JAN-Mar Sun",
        "  0   9 * * *  ",
        "0-59 0-23 1-31 1-12 0-6",
        "*/59 */23 */31 */12 */6",
        "1,2,3-5,10-20/5 * * * *",
        "0 0 0 * * *",
        "59 59 23 31 12 6",
        "00 09 * * 05",
        "0 0 31 2,3 *",
        "0 0 30 2 1",  # day-of-week OR: every Monday
        "0 0 29 2 *",
    ],
)
def test_valid_expressions(expression: str) -> None:
    Cron.parse(expression, "UTC")


@pytest.mark.parametrize(
    ("expression", "field", "item"),
    [
        ("* * * * 7", "day of week", "7"),
        ("60 * * * *", "minute", "60"),
        ("* 24 * * *", "hour", "24"),
        ("* * 0 * *", "day of month", "0"),
        ("* * 32 * *", "day of month", "32"),
        ("* * * 0 *", "month", "0"),
        ("* * * 13 *", "month", "13"),
        ("60 * * * * *", "second", "60"),
        ("5/15 * * * *", "minute", "5/15"),
        ("*/0 * * * *", "minute", "*/0"),
        ("*/60 * * * *", "minute", "*/60"),
        ("* * * * */7", "day of week", "*/7"),
        ("5-2 * * * *", "minute", "5-2"),
        ("1,,2 * * * *", "minute", ""),
        ("1, * * * *", "minute", ""),
        ("? * * * *", "minute", "?"),
        ("* * L * *", "day of month", "L"),
        ("* * 15W * *", "day of month", "15W"),
        ("* * * * 1#2", "day of week", "1#2"),
        ("* * * * mon-sun-tue", "day of week", "mon-sun-tue"),
        ("* * * * jan", "day of week", "jan"),
        ("* * * mon *", "month", "mon"),
        ("jan * * * *", "minute", "jan"),
        ("* * * * monday", "day of week", "monday"),
        ("\u0661 * * * *", "minute", "\u0661"),
        ("-1 * * * *", "minute", "-1"),
        ("*/1/2 * * * *", "minute", "*/1/2"),
        ("0\t9 * * * *", "minute", "0\t9"),
    ],
)
def test_invalid_values(expression: str, field: str, item: str) -> None:
    with pytest.raises(TriggerError) as info:
        Cron.parse(expression, "UTC")
    assert info.value.code == "invalid_cron"
    assert info.value.message == f"Invalid value for {field} in cron expression: '{item}'"
    assert info.value.path is None


@pytest.mark.parametrize(
    "expression", ["", "   ", "@hourly", "* * * *", "* * * * * * *", "0\t9\t*\t*\t*"]
)
def test_segment_count(expression: str) -> None:
    with pytest.raises(TriggerError) as info:
        Cron.parse(expression, "UTC")
    assert info.value.code == "invalid_cron"
    assert info.value.message == "Invalid number of segments in cron expression"


@pytest.mark.parametrize("expression", [None, 42, b"0 * * * *", ["0", "*"]])
def test_not_a_string(expression: object) -> None:
    with pytest.raises(TriggerError) as info:
        Cron.parse(expression)
    assert info.value.code == "invalid_cron"
    assert info.value.message == "cron expression must be a string"


@pytest.mark.parametrize(
    "zone",
    ["", "Mars/Olympus", "utc", "+24:00", "+05:60", "+5:00", "05:00", "+05:00:00", "America", 5],
)
def test_invalid_zones(zone: object) -> None:
    with pytest.raises(TriggerError) as info:
        Cron.parse("0 * * * *", zone)
    assert info.value.code == "invalid_cron"
    assert info.value.message == "Invalid time zone in cron expression"


def test_syntax_is_checked_before_the_zone() -> None:
    with pytest.raises(TriggerError, match="Invalid value for minute"):
        Cron.parse("61 * * * *", "Mars/Olympus")


@pytest.mark.parametrize("expression", ["0 0 30 2 *", "0 0 31 4 *", "0 0 31 2,4,6,9,11 *"])
def test_unsatisfiable(expression: str) -> None:
    with pytest.raises(TriggerError) as info:
        Cron.parse(expression, "UTC")
    assert info.value.code == "unsatisfiable_cron"
    assert info.value.message == f"cron expression '{expression}' has no next occurrence"


def test_exhaustion_at_the_calendar_edges() -> None:
    cron = Cron.parse("0 0 29 2 *", "UTC")
    # 9996 is the last leap year before 10000.
    last = z("9996-02-29T00:00Z")
    assert cron.previous_at_or_before(z("9999-12-31T00:00Z")) == last
    with pytest.raises(TriggerError) as info:
        cron.next(last)
    assert info.value.message == "cron expression '0 0 29 2 *' has no next occurrence"
    with pytest.raises(TriggerError) as info:
        cron.occurrences_between(last - D, last + 10 * 366 * D)
    assert info.value.message == "cron expression '0 0 29 2 *' has no interval occurrence"
    with pytest.raises(TriggerError) as info:
        cron.previous_at_or_before(z("0001-06-01T00:00Z"))
    assert info.value.message == "cron expression '0 0 29 2 *' has no previous occurrence"
    # Probing from an instant past the calendar refuses instead of crashing.
    with pytest.raises(TriggerError) as info:
        Cron.parse("0 0 * * *", "UTC", now=2**53 - 1)
    assert info.value.code == "unsatisfiable_cron"


@pytest.mark.parametrize("instant", [2**53 - 1, -(2**53 - 1), 10**30, -(10**30)])
@pytest.mark.parametrize("zone", ["UTC", LA, "+05:30"])
def test_huge_instants_never_crash(instant: int, zone: str) -> None:
    cron = Cron.parse("0 0 * * *", zone)
    for call in (cron.next, cron.previous_at_or_before):
        with pytest.raises(TriggerError) as info:
            call(instant)
        assert info.value.code == "unsatisfiable_cron"


def test_leap_day_every_eight_years() -> None:
    cron = Cron.parse("0 0 29 2 *", "UTC")
    assert cron.next(z("2096-03-01T00:00Z")) == z("2104-02-29T00:00Z")
    assert cron.previous_at_or_before(z("2104-02-28T00:00Z")) == z("2096-02-29T00:00Z")
    Cron.parse("0 0 29 2 *", "UTC", now=z("2096-03-01T00:00Z"))


def test_cron_copies_and_pickles() -> None:
    import copy
    import pickle

    cron = Cron.parse("0 9 * * 5", LA)
    assert copy.deepcopy(cron) == cron
    again = pickle.loads(pickle.dumps(cron))
    assert again == cron
    assert again.next(SPRING[0]) == cron.next(SPRING[0])


def test_absurdly_long_numbers_are_invalid_values() -> None:
    for expression in ["1" * 5000 + " * * * *", "*/" + "9" * 5000 + " * * * *"]:
        with pytest.raises(TriggerError) as info:
            Cron.parse(expression, "UTC")
        assert info.value.code == "invalid_cron"
        assert info.value.message.startswith("Invalid value for minute in cron expression: ")
    assert Cron.parse("0000000000000005 * * * *", "UTC").next(0) == 5 * 60_000
