"""Golden occurrences across DST transitions.

``data/golden_dst.json`` pins, for several zones and typical expressions, every occurrence in a
window of 36 hours either side of each 2026 transition (and those of 2027 for Los Angeles and
Lord Howe). A croniter or tzdata upgrade that changes a schedule fails this test instead of
silently moving fires. Regenerate deliberately with
``.venv/bin/python -m tests.foundation.test_cron_golden`` after checking the change is right.
"""

from __future__ import annotations

import datetime
import json
import zoneinfo
from pathlib import Path

from trio_triggers import Cron, iso

GOLDEN = Path(__file__).with_name("data") / "golden_dst.json"
H = 3_600_000
ZONES_2026 = [
    "America/Los_Angeles",
    "America/New_York",
    "America/St_Johns",
    "America/Santiago",
    "Europe/London",
    "Europe/Berlin",
    "Australia/Lord_Howe",
    "Australia/Sydney",
    "Pacific/Chatham",
]
ZONES_2027 = ["America/Los_Angeles", "Australia/Lord_Howe"]
EXPRESSIONS = [
    "30 2 * * *",
    "30 1 * * *",
    "0 * * * *",
    "*/20 0-3 * * *",
    "0 0 * * *",
    "15 2 * * 0",
    "0 9 * * 1-5",
    "45 1,2 * * *",
    "0 30 2 * * *",
    "*/30 1 * * *",
]


def _transitions(zone: str, year: int) -> list[int]:
    tz = zoneinfo.ZoneInfo(zone)
    start = int(datetime.datetime(year, 1, 1, tzinfo=datetime.UTC).timestamp()) * 1000
    found = []
    previous = None
    for hour in range(366 * 24):
        t = start + hour * H
        offset = datetime.datetime.fromtimestamp(t // 1000, tz).utcoffset()
        if previous is not None and offset != previous:
            found.append(t)
        previous = offset
    return found


def compute() -> dict[str, list[str]]:
    result: dict[str, list[str]] = {}
    cases = [(zone, 2026) for zone in ZONES_2026] + [(zone, 2027) for zone in ZONES_2027]
    for zone, year in cases:
        for transition in _transitions(zone, year):
            start, end = transition - 36 * H, transition + 36 * H
            for expression in EXPRESSIONS:
                cron = Cron.parse(expression, zone)
                key = f"{zone} | {expression} | {iso(start)} | {iso(end)}"
                result[key] = [iso(o) for o in cron.occurrences_between(start, end)]
    return result


def test_golden_dst_occurrences() -> None:
    expected = json.loads(GOLDEN.read_text(encoding="utf-8"))
    actual = compute()
    assert sorted(actual) == sorted(expected)
    for key, occurrences in expected.items():
        assert actual[key] == occurrences, key


if __name__ == "__main__":
    GOLDEN.write_text(json.dumps(compute(), indent=0) + "\n", encoding="utf-8")
