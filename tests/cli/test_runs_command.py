"""``trio-triggers runs`` and ``Triggers.list_runs`` (issue 15: every run's outcome in sight)."""

from __future__ import annotations

import json
import subprocess
import sys
from typing import TYPE_CHECKING, Any

import trio
import trio.testing

import trio_triggers
from trio_triggers import RunContext, TrioWallClock

if TYPE_CHECKING:
    from pathlib import Path

EPOCH = 1_800_000_000_000


def _serve(database: Path) -> None:
    """Two triggers for 3.5 simulated seconds: ``ok`` completes, ``bad`` fails every time."""

    async def serve() -> None:
        async with trio_triggers.open_triggers(database, clock=TrioWallClock(EPOCH)) as app:

            @app.flow
            async def ok(input: Any, run: RunContext) -> int:
                return 1

            @app.flow
            async def bad(input: Any, run: RunContext) -> None:
                raise ValueError("no space left")

            await app.schedule("ok", ok, cron="* * * * * *")
            await app.schedule("bad", bad, cron="* * * * * *")
            async with trio.open_nursery() as nursery:
                await nursery.start(app.serve)
                await trio.sleep(3.5)
                nursery.cancel_scope.cancel()
            reports = await app.list_runs(trigger_id="bad", limit=2)
            assert [r.trigger_id for r in reports] == ["bad", "bad"]
            assert reports[0].created_at >= reports[1].created_at  # newest first
            assert all(r.status == "failed" for r in reports)

    trio.run(serve, clock=trio.testing.MockClock(autojump_threshold=0))


def _cli(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "trio_triggers.cli", *args],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )


def test_runs_lists_filters_and_refuses_a_bad_state(tmp_path: Path) -> None:
    database = tmp_path / "app.sqlite"
    _serve(database)
    db = ("--db", str(database))

    done = _cli("runs", *db, "--json")
    assert done.returncode == 0, done.stderr
    every = json.loads(done.stdout)
    assert {r["trigger_id"] for r in every} == {"ok", "bad"}
    created = [r["created_at"] for r in every]
    assert created == sorted(created, reverse=True)

    done = _cli("runs", *db, "--trigger", "bad", "--state", "failed", "--json")
    assert done.returncode == 0, done.stderr
    failed = json.loads(done.stdout)
    assert failed
    assert {(r["trigger_id"], r["status"]) for r in failed} == {("bad", "failed")}
    assert all("no space left" in r["error"] for r in failed)

    done = _cli("runs", *db, "--trigger", "ok", "--limit", "1", "--utc")
    assert done.returncode == 0, done.stderr
    lines = done.stdout.splitlines()
    assert lines[0].split() == [
        "RUN", "STATUS", "TRIGGER", "OCCURRENCE", "STARTED", "FINISHED", "ERROR"
    ]  # fmt: skip
    assert len(lines) == 3  # the header, its rule and one run
    assert " completed " in lines[2]
    assert " ok " in lines[2]

    done = _cli("runs", *db, "--state", "exploded")
    assert done.returncode == 2
    assert "invalid choice: 'exploded'" in done.stderr
    assert (
        "(choose from 'cancelled', 'completed', 'failed', 'pending', 'running', 'suspended')"
        in done.stderr
    )

    done = _cli("runs", *db, "--limit", "0")
    assert done.returncode == 2
    assert "--limit: must be a positive number of runs" in done.stderr

    done = _cli("runs", *db, "--trigger", "nobody")
    assert done.returncode == 0
    assert done.stdout.strip() == "no runs recorded"
