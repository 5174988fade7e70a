"""The CLI's human side of time (pendulum): rendering instants, parsing instants and durations."""

from __future__ import annotations

import pytest

from trio_triggers.cli._time import format_local, parse_duration, parse_instant, relative

NOW = 1_780_000_000_000  # 2026-05-28 20:26:40 UTC
MIN = 60_000
H = 60 * MIN


def test_format_local_renders_wall_time_with_the_zone() -> None:
    assert format_local(NOW, "Europe/Paris") == "2026-05-28 22:26:40 CEST"
    assert format_local(NOW, "UTC") == "2026-05-28 20:26:40 UTC"
    assert format_local(NOW, "+05:30") == "2026-05-29 01:56:40 +05:30"
    assert format_local(None, "UTC") == "-"
    with pytest.raises(ValueError, match="unknown timezone"):
        format_local(NOW, "Mars/Olympus")


def test_relative_says_it_as_people_do() -> None:
    assert relative(NOW + 3 * MIN, NOW) == "in 3 minutes"
    assert relative(NOW - 2 * H, NOW) == "2 hours ago"
    assert relative(None, NOW) == "-"


@pytest.mark.parametrize(
    ("text", "seconds"),
    [
        ("30d", 30 * 86400.0),
        ("2h", 7200.0),
        ("1.5m", 90.0),
        ("250ms", 0.25),
        ("45", 45.0),
        ("P30D", 30 * 86400.0),
        ("PT2H30M", 9000.0),
    ],
)
def test_parse_duration(text: str, seconds: float) -> None:
    assert parse_duration(text) == seconds


@pytest.mark.parametrize("text", ["", "soon", "-5m", "0s", "P1M", "P1Y"])
def test_parse_duration_refuses(text: str) -> None:
    with pytest.raises(ValueError, match="duration"):
        parse_duration(text)


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("now", NOW),
        ("2h", NOW - 2 * H),
        ("-2h", NOW - 2 * H),
        ("+30m", NOW + 30 * MIN),
        ("30d", NOW - 30 * 24 * H),
        ("2026-03-10T02:00:00+01:00", 1_773_104_400_000),
        ("2026-03-10T01:00:00.123Z", 1_773_104_400_123),
        ("2026-03-10T01:00:00", 1_773_104_400_000),  # naive: UTC by default
    ],
)
def test_parse_instant(text: str, expected: int) -> None:
    assert parse_instant(text, now_ms=NOW) == expected


def test_a_naive_instant_is_a_wall_time_in_the_given_zone() -> None:
    assert parse_instant("2026-03-10 02:00", now_ms=NOW, tz="Europe/Paris") == 1_773_104_400_000
    assert parse_instant("2026-03-10", now_ms=NOW, tz="Europe/Paris") == 1_773_097_200_000
    # an explicit offset wins over the zone
    assert parse_instant("2026-03-10T02:00:00+01:00", now_ms=NOW, tz="UTC") == 1_773_104_400_000


@pytest.mark.parametrize("text", ["yesterday", "12:00", "P1M", "2026-13-01"])
def test_parse_instant_refuses(text: str) -> None:
    with pytest.raises(ValueError, match="not an instant"):
        parse_instant(text, now_ms=NOW)
