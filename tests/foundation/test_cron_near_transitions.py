"""The near-transition search gives exactly the reference walk's occurrences.

Within a few days of a DST transition ``_cron`` answers ``next`` and ``previous_at_or_before``
with one or two croniter calls (a run of wall times on each side of the transition) instead of
walking every matching wall time. ``_cron_reference`` keeps the old walk (the reference
algorithm of ``triggers.md`` §4.2, without shortcuts); this test compares the two around every
2027 transition of five zones chosen for their shifts: one hour (New York, Berlin), 30 minutes
(Lord Howe), two hours (Troll) and a +12:45 offset (Chatham).
"""

from __future__ import annotations

import datetime
import itertools
import random
import zoneinfo

import pytest

from trio_triggers import Cron
from trio_triggers._cron import _compile, _named_zone, _next, _previous

from ._cron_reference import reference_next, reference_previous
from ._util import MIN, D, H, z

ZONES = [
    "America/New_York",
    "Europe/Berlin",
    "Australia/Lord_Howe",
    "Antarctica/Troll",
    "Pacific/Chatham",
]
SIX_FIELDS = [
    "* * * * * *",
    "*/7 * * * * *",
    "30 * 2 * * *",
    "0 */15 1-3 * * *",
    "15 30 2 * * *",
    "59 59 * * * *",
]
FIVE_FIELDS = [
    "* * * * *",
    "*/5 * * * *",
    "30 2 * * *",
    "0 * * * *",
    "15 1,2,3 * * *",
    "45 1 * * 0",
    "0 2 13 * 1",
    "*/20 0-3 * 3,4,9,10 *",
]


def transitions_2027(key: str) -> list[int]:
    """The instants (ms) at which ``key``'s UTC offset changes in 2027, found independently."""
    tz = zoneinfo.ZoneInfo(key)

    def offset(seconds: int) -> datetime.timedelta | None:
        return datetime.datetime.fromtimestamp(seconds, tz).utcoffset()

    found = []
    start = z("2027-01-01T00:00Z") // 1000
    for hour in range(366 * 24):
        low, high = start + hour * 3600, start + (hour + 1) * 3600
        if offset(low) != offset(high):
            before = offset(low)
            while high - low > 1:
                middle = (low + high) // 2
                low, high = (middle, high) if offset(middle) == before else (low, middle)
            found.append(high * 1000)
    return found


CASES = [(key, t) for key in ZONES for t in transitions_2027(key)]


def test_each_zone_has_two_transitions_in_2027() -> None:
    assert [key for key, _ in CASES] == [key for key in ZONES for _ in range(2)]


@pytest.mark.parametrize(("key", "transition"), CASES)
@pytest.mark.parametrize("expression", SIX_FIELDS + FIVE_FIELDS)
def test_next_and_previous_match_the_reference(key: str, transition: int, expression: str) -> None:
    compiled, zone = _compile(expression), _named_zone(key)
    rng = random.Random(f"{key} {transition} {expression}")
    # The reference walk is slow here (up to 7 200 croniter calls for a per-second cron next to
    # Troll's two-hour shift), so frequent expressions get fewer random instants; every case
    # also gets the transition itself and the edges of its gap or repeat, +-1 ms.
    count = 4 if compiled.has_seconds else 24
    deltas = (-1, 0) if compiled.has_seconds else (-1000, -1, 0, 1)
    shift = abs(zone.off(transition) - zone.off(transition - 1000))
    edges = [transition, transition + shift, transition - shift, transition + 2 * H]
    starts = [edge + delta for edge in edges for delta in deltas]
    starts += [transition + rng.randrange(-3 * H, 3 * H) for _ in range(count)]
    starts += [transition + rng.randrange(-2 * D, 2 * D) for _ in range(count // 2)]
    for start in starts:
        assert _next(compiled, zone, start) == reference_next(compiled, zone, start), start
        assert _previous(compiled, zone, start) == reference_previous(compiled, zone, start), start


@pytest.mark.parametrize(("key", "transition"), CASES)
@pytest.mark.parametrize("expression", [e for e in FIVE_FIELDS if e != "* * * * *"])
def test_occurrences_across_the_transition_match_the_reference(
    key: str, transition: int, expression: str
) -> None:
    compiled, zone = _compile(expression), _named_zone(key)
    start, end = transition - 3 * H, transition + 3 * H
    if not compiled.every_hour:
        start, end = transition - 2 * D, transition + 2 * D
    expected: list[int] = []
    cursor = start
    while True:
        found = reference_next(compiled, zone, cursor)
        assert found is not None
        if found > end:
            break
        expected.append(found)
        cursor = found
    assert Cron.parse(expression, key).occurrences_between(start, end, limit=10_000) == expected


@pytest.mark.parametrize("key", ZONES)
def test_a_per_second_walk_across_the_transitions(key: str) -> None:
    """Every second of the 20 minutes around each transition: the walk the issue timed."""
    cron = Cron.parse("* * * * * *", key)
    compiled, zone = _compile("* * * * * *"), _named_zone(key)
    for transition in transitions_2027(key):
        start = transition - 10 * MIN
        walk = cron.occurrences_between(start, start + 20 * MIN, limit=10_000)
        assert walk[0] == reference_next(compiled, zone, start)
        for earlier, later in itertools.pairwise(walk):
            assert later - earlier == 1000 or later == reference_next(compiled, zone, earlier)
        assert walk[-1] == reference_previous(compiled, zone, start + 20 * MIN)
