"""``list`` shows each trigger's occurrences that do not run, by reason (issue 16, item 6)."""

from __future__ import annotations

import json
from typing import TYPE_CHECKING

import trio

from trio_triggers import Dropped, Trigger
from trio_triggers._store._sqlite_store import open_sqlite_trigger_store
from trio_triggers.cli import main

if TYPE_CHECKING:
    from pathlib import Path

    import pytest

H = 3_600_000


class _Clock:
    def __init__(self) -> None:
        self.value = 0

    def now_ms(self) -> int:
        return self.value


def _give_up_some(database: Path) -> None:
    """An hourly trigger with two overlap skips, a catch-up drop of 3 and one over its bound,
    and 4 boundaries given up by a resume from now; and a second one that missed nothing."""

    async def write() -> None:
        clock = _Clock()
        async with open_sqlite_trigger_store(str(database), clock=clock) as store:
            hourly = {"flow_id": "f", "input": None, "cron": "0 * * * *", "timezone": "UTC"}
            await store.register(Trigger.make({"id": "busy", **hourly}))
            await store.register(Trigger.make({"id": "calm", **hourly}))
            dropped = Dropped(after=0, catch_up=3, catch_up_bound=1)
            first = await store.claim_fire("busy", 5 * H, expected_revision=1, dropped=dropped)
            assert first.action == "fire"
            for occurrence in (6 * H, 7 * H):
                assert (await store.claim_fire("busy", occurrence, expected_revision=1)).claimed
            clock.value = 7 * H + 5
            await store.pause("busy")
            clock.value = 11 * H + 5  # 8H ... 11H fall due while paused
            assert (await store.resume("busy", point="now")).skipped == 4

    trio.run(write)


def test_list_json_shows_every_reason_per_trigger(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    database = tmp_path / "t.sqlite"
    _give_up_some(database)
    assert main(["list", "--db", str(database), "--json"]) == 0
    rows = {row["trigger_id"]: row for row in json.loads(capsys.readouterr().out)}
    busy = rows["busy"]["missed"]
    assert busy == {"overlap": 2, "catch_up": 3, "catch_up_bound": 1, "paused": 4}
    assert rows["calm"]["missed"] == {
        "overlap": 0,
        "catch_up": 0,
        "catch_up_bound": 0,
        "paused": 0,
    }


def test_list_wide_shows_the_total_and_its_reasons(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    database = tmp_path / "t.sqlite"
    _give_up_some(database)
    assert main(["list", "--db", str(database), "--wide", "--utc"]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert lines[0].split()[-1] == "MISSED"
    (busy,) = [line for line in lines if line.startswith("busy")]
    (calm,) = [line for line in lines if line.startswith("calm")]
    assert busy.rstrip().endswith(" 10 (overlap 2, catch_up 3, catch_up_bound 1, paused 4)")
    assert calm.rstrip().endswith(" 0")
