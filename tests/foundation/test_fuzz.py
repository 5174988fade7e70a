"""Fuzzed bad input only ever raises ``TriggerError`` with a documented code."""

from __future__ import annotations

import datetime
import decimal
import math

from hypothesis import given, settings, strategies as st

from trio_triggers import MAX_SAFE_INTEGER, Cron, Schedule, Trigger, TriggerError
from trio_triggers._durations import duration_ms
from trio_triggers._json import JsonValueError, copy_json

CRON_CODES = {"invalid_cron", "unsatisfiable_cron"}
TRIGGER_CODES = {"invalid_trigger", *CRON_CODES}
SCHEDULE_CODES = {"invalid_schedule", *CRON_CODES}
OPERATION_CODES = {"unsatisfiable_cron", "invalid_options", "catch_up_bound_exceeded"}

_TOKENS = st.sampled_from(
    ["*", "*/5", "0", "7", "59", "60", "1-5", "5-1", "mon", "SUN", "jan", "L", "?", "#", "W",
     "/", "-", ",", "1,2", "99999999999999999999", "", " ", "\t", "\x00", "@hourly", "*/0"]
)  # fmt: skip
_EXPRESSIONS = st.one_of(
    st.text(max_size=40),
    st.lists(_TOKENS, max_size=8).map(" ".join),
    st.lists(st.text(alphabet="0123456789*/-,LW#?smtwfjaondec", max_size=6), max_size=7).map(
        " ".join
    ),
)
_ZONES = st.one_of(
    st.none(),
    st.text(max_size=20),
    st.sampled_from(
        ["UTC", "America/New_York", "Mars/Base", "+24:00", "+05:30", "-00:00", "../x", "/etc",
         "America", "utc", "+5", "EST5EDT", "localtime", "Etc/GMT+14"]
    ),
    st.integers(),
)  # fmt: skip
_INSTANTS = st.one_of(
    st.integers(-(2**70), 2**70),
    st.integers(-MAX_SAFE_INTEGER, MAX_SAFE_INTEGER),
    st.sampled_from([0, -1, MAX_SAFE_INTEGER, -MAX_SAFE_INTEGER, 253_402_300_799_999]),
)


@settings(max_examples=300, deadline=None)
@given(expression=_EXPRESSIONS, zone=_ZONES, now=_INSTANTS)
def test_cron_parse(expression: str, zone: object, now: int) -> None:
    try:
        cron = Cron.parse(expression, zone, now=now)
    except TriggerError as error:
        assert error.code in CRON_CODES
        return
    assert cron.expression == expression


@settings(max_examples=200, deadline=None)
@given(
    fields=st.lists(
        st.sampled_from(["*", "0", "7", "*/7", "31", "2", "30", "sun", "feb", "0-6", "1-31"]),
        min_size=4,
        max_size=7,
    ),
    instants=st.lists(_INSTANTS, min_size=1, max_size=4),
    limit=st.one_of(st.none(), st.integers(-5, 5), st.floats(allow_nan=True)),
)
def test_cron_operations(fields: list[str], instants: list[int], limit: object) -> None:
    try:
        cron = Cron.parse(" ".join(fields), "America/Los_Angeles")
    except TriggerError as error:
        assert error.code in CRON_CODES
        return
    for instant in instants:
        for call in (cron.next, cron.previous_at_or_before):
            try:
                found = call(instant)
            except TriggerError as error:
                assert error.code == "unsatisfiable_cron"
            else:
                assert found % 1000 == 0
        try:
            cron.occurrences_between(instant, instant + 86_400_000, limit=limit)  # type: ignore[arg-type]
        except TriggerError as error:
            assert error.code in OPERATION_CODES


class Weird:
    pass


_SCALARS = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(),
    st.integers(min_value=2**64, max_value=2**200),
    st.floats(allow_nan=True, allow_infinity=True),
    st.text(max_size=8),
    st.binary(max_size=4),
    st.just(datetime.datetime(2026, 1, 1)),
    st.just(decimal.Decimal("1.5")),
    st.just(Weird()),
    st.just(math.inf),
)
_VALUES = st.recursive(
    _SCALARS,
    lambda children: st.one_of(
        st.lists(children, max_size=4),
        st.lists(children, max_size=3).map(tuple),
        st.dictionaries(st.text(max_size=4), children, max_size=4),
        st.dictionaries(st.integers(), children, max_size=2),
        st.frozensets(st.integers(), max_size=3),
    ),
    max_leaves=12,
)


@settings(max_examples=300, deadline=None)
@given(value=_VALUES)
def test_json_values(value: object) -> None:
    try:
        copied = copy_json(value)
    except JsonValueError as error:
        assert "\n" not in str(error)
        return
    assert copied == value or isinstance(copied, float | dict | list)


_DECLARATION_VALUES = st.one_of(_VALUES, _EXPRESSIONS, _ZONES)
_KEYS = st.sampled_from(
    ["id", "flow_id", "input", "cron", "timezone", "overlap", "catch_up", "max_catch_up",
     "enabled", "other"]
)  # fmt: skip


@settings(max_examples=300, deadline=None)
@given(
    declaration=st.one_of(
        st.dictionaries(_KEYS, _DECLARATION_VALUES, max_size=10),
        st.fixed_dictionaries(
            {"id": st.just("t"), "flow_id": st.just("f"), "input": _VALUES, "cron": _EXPRESSIONS},
            optional={"timezone": _ZONES, "max_catch_up": st.integers(-(2**70), 2**70)},
        ),
        _VALUES,
    )
)
def test_declarations(declaration: object) -> None:
    try:
        trigger = Trigger.make(declaration)
    except TriggerError as error:
        assert error.code in TRIGGER_CODES
        assert "\n" not in error.message
    else:
        assert isinstance(trigger, Trigger)
    try:
        Schedule.make(declaration)
    except TriggerError as error:
        assert error.code in SCHEDULE_CODES


@settings(max_examples=200, deadline=None)
@given(value=st.one_of(_SCALARS, st.timedeltas(), st.floats(), st.integers(-(2**80), 2**80)))
def test_durations(value: object) -> None:
    try:
        ms = duration_ms("poll_interval", value)
    except TriggerError as error:
        assert error.code == "invalid_options"
        assert error.path == "poll_interval"
    else:
        assert 1 <= ms <= MAX_SAFE_INTEGER
