"""Property test: ``Cron`` against a brute-force oracle of the §4.2 wall-clock rules.

The oracle shares nothing with the implementation: it steps through *instants* one minute (or,
for 6-field expressions, one second) at a time, converts each to wall time with ``zoneinfo``,
matches the fields it built itself from the generated items, and applies the rules directly:

* a wall time seen once fires at its instant;
* a wall time seen twice (fall-back) fires at its first instant, and at the second too only
  when the hour field is unconstrained;
* wall times skipped by a spring-forward jump fire at ``wall - offset_before``.

``next``, ``previous_at_or_before`` and ``occurrences_between`` must then agree with the
oracle's occurrence set for query instants well inside the stepped window.
"""

from __future__ import annotations

import bisect
import datetime
import functools
import zoneinfo
from dataclasses import dataclass
from typing import TYPE_CHECKING

from hypothesis import HealthCheck, given, settings, strategies as st

from trio_triggers import Cron

from ._util import MIN, D, H

if TYPE_CHECKING:
    from collections.abc import Callable

S = 1000
EPOCH = datetime.datetime(1970, 1, 1)

ZONES = [
    "America/Los_Angeles",
    "America/New_York",
    "America/St_Johns",
    "America/Santiago",
    "Europe/London",
    "Europe/Berlin",
    "Australia/Lord_Howe",
    "Australia/Sydney",
    "Pacific/Chatham",
    "Asia/Kolkata",
    "UTC",
    "+05:30",
    "-09:30",
    "+00:00",
]

# (name, low, high, names)
FIELDS: list[tuple[str, int, int, tuple[str, ...]]] = [
    ("second", 0, 59, ()),
    ("minute", 0, 59, ()),
    ("hour", 0, 23, ()),
    ("dom", 1, 31, ()),
    ("month", 1, 12, ("jan", "feb", "mar", "apr", "may", "jun", "jul", "aug", "sep", "oct",
                      "nov", "dec")),
    ("dow", 0, 6, ("sun", "mon", "tue", "wed", "thu", "fri", "sat")),
]  # fmt: skip


@functools.cache
def _transitions(zone: str) -> list[int]:
    """Hours (as instants) around which the zone's offset changes, 2025-2028."""
    if zone.startswith(("+", "-")):
        return []
    tz = zoneinfo.ZoneInfo(zone)
    start = int(datetime.datetime(2025, 1, 1, tzinfo=datetime.UTC).timestamp()) * S
    found: list[int] = []
    previous = None
    for hour in range(4 * 366 * 24):
        t = start + hour * H
        offset = datetime.datetime.fromtimestamp(t // S, tz).utcoffset()
        if previous is not None and offset != previous:
            found.append(t)
        previous = offset
    return found


def _offset_fn(zone: str) -> Callable[[int], int]:
    if zone.startswith(("+", "-")):
        sign = -1 if zone[0] == "-" else 1
        fixed = sign * (int(zone[1:3]) * 60 + int(zone[4:6])) * MIN
        return lambda t: fixed
    tz = zoneinfo.ZoneInfo(zone)

    def offset(t: int) -> int:
        delta = datetime.datetime.fromtimestamp(t // S, tz).utcoffset()
        assert delta is not None
        return int(delta.total_seconds()) * S

    return offset


@dataclass(frozen=True)
class Expression:
    text: str
    sets: tuple[frozenset[int], ...]  # second, minute, hour, dom, month, dow
    six: bool

    @property
    def every_hour(self) -> bool:
        return len(self.sets[2]) == 24

    def matches(self, wall: int) -> bool:
        when = EPOCH + datetime.timedelta(milliseconds=wall)
        second, minute, hour, dom, month, dow = self.sets
        if when.second not in second or when.minute not in minute:
            return False
        if when.hour not in hour or when.month not in month:
            return False
        weekday = (when.weekday() + 1) % 7
        day_ok, dow_ok = when.day in dom, weekday in dow
        if len(dom) < 31 and len(dow) < 7:
            return day_ok or dow_ok
        return day_ok and dow_ok


@st.composite
def _field(draw: st.DrawFn, index: int, sparse: bool) -> tuple[str, frozenset[int]]:
    _, low, high, names = FIELDS[index]
    items: list[str] = []
    values: set[int] = set()

    def number(value: int) -> str:
        spelled: bool = draw(st.booleans())
        if not names or not spelled:
            return str(value)
        name = names[value - low]
        return draw(st.sampled_from([name, name.upper(), name.title()]))

    kinds = ["value", "range", "range-step", "star-step"] if sparse else ["star"]
    if not sparse:
        kinds += ["star-step", "range", "value"]
    for _ in range(draw(st.integers(1, 2))):
        kind = draw(st.sampled_from(kinds))
        if kind == "star":
            items.append("*")
            values.update(range(low, high + 1))
        elif kind == "star-step":
            step = draw(st.integers(1, high))
            items.append(f"*/{step}")
            values.update(range(low, high + 1, step))
        elif kind == "value":
            value = draw(st.integers(low, high))
            items.append(number(value))
            values.add(value)
        else:
            a = draw(st.integers(low, high))
            b = draw(st.integers(a, min(high, a + 6)))
            if kind == "range":
                items.append(f"{number(a)}-{number(b)}")
                values.update(range(a, b + 1))
            else:
                step = draw(st.integers(1, high))
                items.append(f"{number(a)}-{number(b)}/{step}")
                values.update(range(a, b + 1, step))
    return ",".join(items), frozenset(values)


@st.composite
def expressions(draw: st.DrawFn, six: bool) -> Expression:
    rendered: list[str] = []
    sets: list[frozenset[int]] = []
    # Typical schedules: seconds and minutes sparse, hours either sparse (near the usual
    # transition hours) or free, days mostly free so a few days hold some occurrences.
    sparse_flags = [True, True, draw(st.booleans()), draw(st.integers(0, 4)) == 0,
                    draw(st.integers(0, 5)) == 0, draw(st.integers(0, 2)) == 0]  # fmt: skip
    if six and draw(st.booleans()):
        sparse_flags[1] = False  # every minute, a few seconds
    for index in range(6):
        if index == 0 and not six:
            sets.append(frozenset({0}))
            continue
        if index == 2 and sparse_flags[2]:
            hour = draw(st.sampled_from([0, 1, 2, 3, 22, 23]))
            text, values = draw(_field(index, sparse=True))
            text, values = f"{hour},{text}", values | {hour}
        else:
            text, values = draw(_field(index, sparse=sparse_flags[index]))
        rendered.append(text)
        sets.append(frozenset(values))
    text = " ".join(rendered)
    return Expression(text=text, sets=tuple(sets), six=six)


def _oracle(expr: Expression, zone: str, low: int, high: int) -> list[int]:
    """Occurrences with instants stepped over ``[low, high)``, by the §4.2 rules."""
    step = S if expr.six else MIN
    offset = _offset_fn(zone)
    found: set[int] = set()
    seen: set[int] = set()
    previous_t: int | None = None
    previous_off = 0
    for t in range(low, high, step):
        off = offset(t)
        wall = t + off
        if previous_t is not None and off > previous_off:
            for skipped in range(previous_t + previous_off + step, wall, step):
                if expr.matches(skipped):
                    found.add(skipped - previous_off)
        if expr.matches(wall):
            if wall not in seen:
                seen.add(wall)
                found.add(t)
            elif expr.every_hour:
                found.add(t)
        previous_t, previous_off = t, off
    return sorted(found)


@st.composite
def scenarios(draw: st.DrawFn, six: bool) -> tuple[Expression, str, int]:
    expr = draw(expressions(six))
    zone = draw(st.sampled_from(ZONES))
    transitions = _transitions(zone)
    if transitions and draw(st.integers(0, 3)) > 0:
        center = draw(st.sampled_from(transitions))
    else:
        center = 1_767_225_600_000 + draw(st.integers(0, 3 * 365)) * D  # 2026-2028
    spread = 2 * H if six else 2 * D
    center += draw(st.integers(-spread, spread)) // S * S
    return expr, zone, center


def _check(expr: Expression, zone: str, center: int, queries: list[int]) -> None:
    margin = 2 * H if expr.six else 2 * D
    reach = 3 * H if expr.six else 4 * D
    low, high = center - reach - margin, center + reach + margin
    occ = _oracle(expr, zone, low, high)
    cron = Cron.parse(expr.text, zone, now=center)
    inner_low, inner_high = low + margin, high - margin
    for q in queries:
        t = center + q
        if not inner_low <= t <= inner_high:
            continue
        i = bisect.bisect_right(occ, t)
        if i < len(occ) and occ[i] < inner_high:
            assert cron.next(t) == occ[i], (expr.text, zone, t)
        j = bisect.bisect_right(occ, t // S * S) - 1
        if j >= 0 and occ[j] > inner_low:
            assert cron.previous_at_or_before(t) == occ[j], (expr.text, zone, t)
    a, b = inner_low + (inner_high - inner_low) // 4, inner_high - (inner_high - inner_low) // 4
    expected = [o for o in occ if a < o <= b]
    if occ and occ[0] < a and occ[-1] > b:
        assert cron.occurrences_between(a, b, limit=5000) == expected[:5000], (expr.text, zone)


_offsets = st.lists(st.integers(-3 * D, 3 * D), min_size=4, max_size=12)


@settings(max_examples=100, suppress_health_check=[HealthCheck.too_slow], deadline=None)
@given(scenario=scenarios(six=False), offsets=_offsets, data=st.data())
def test_five_fields_match_the_oracle(
    scenario: tuple[Expression, str, int], offsets: list[int], data: st.DataObject
) -> None:
    expr, zone, center = scenario
    # Also ask exactly at, just before and just after an oracle occurrence.
    occ = _oracle(expr, zone, center - D, center + D)
    extra: list[int] = []
    if occ:
        o = data.draw(st.sampled_from(occ)) - center
        extra = [o, o - 1, o + 1, o + 999, o + 1000, o - 1000]
    _check(expr, zone, center, offsets + extra)


@settings(max_examples=30, suppress_health_check=[HealthCheck.too_slow], deadline=None)
@given(scenario=scenarios(six=True), offsets=st.lists(st.integers(-2 * H, 2 * H), max_size=8))
def test_six_fields_match_the_oracle(
    scenario: tuple[Expression, str, int], offsets: list[int]
) -> None:
    expr, zone, center = scenario
    _check(expr, zone, center, offsets)


@settings(max_examples=60, deadline=None)
@given(scenario=scenarios(six=False), offsets=_offsets)
def test_consistency_invariants(scenario: tuple[Expression, str, int], offsets: list[int]) -> None:
    """§20.3 invariant 32 on arbitrary instants (no oracle needed)."""
    expr, zone, center = scenario
    cron = Cron.parse(expr.text, zone, now=center)
    for q in offsets:
        t = center + q
        nxt = cron.next(t)
        prev = cron.previous_at_or_before(t)
        assert nxt > t
        assert prev <= t
        assert nxt % S == 0
        assert prev % S == 0
        assert cron.next(prev) == nxt
        between = cron.occurrences_between(prev, nxt, limit=10)
        assert between == [nxt]


@settings(max_examples=60, deadline=None)
@given(scenario=scenarios(six=False), offsets=_offsets, data=st.data())
def test_memoized_answers_equal_fresh_walks(
    scenario: tuple[Expression, str, int], offsets: list[int], data: st.DataObject
) -> None:
    """The per-expression gap memo (``_cron._GAPS``) never changes an answer: queries around
    and inside a remembered gap agree with an uncached walk."""
    from trio_triggers import _cron

    expr, zone, center = scenario
    cron = Cron.parse(expr.text, zone, now=center)
    compiled, resolved = cron._compiled, cron._resolved_zone()
    for q in offsets:
        t = center + q
        prev = cron.previous_at_or_before(t)  # remembers the gap around t
        nxt = cron.next(prev)
        for probe in (prev - 1, prev, prev + 1, t, nxt - 1, nxt, nxt + 1, (prev + nxt) // 2):
            probe += data.draw(st.sampled_from([0, 0, 999, -999]))
            assert cron.next(probe) == _cron._next(compiled, resolved, probe), (expr.text, probe)
            assert cron.previous_at_or_before(probe) == _cron._previous(
                compiled, resolved, probe
            ), (expr.text, probe)
