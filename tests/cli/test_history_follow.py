"""``trio-triggers history --follow`` (issue 16): what is new in a ledger without write order,
and the command in a subprocess beside a serving ``run``."""

from __future__ import annotations

import json
import os
import queue
import signal
import subprocess
import sys
import threading
import time
from typing import TYPE_CHECKING, Any

import trio

from trio_triggers._store import Fire, FireRecord, HistoryPage, HistoryQuery, Outcome
from trio_triggers.cli import main
from trio_triggers.cli._follow import Follower

if TYPE_CHECKING:
    from pathlib import Path

    import pytest

MINUTE = 60_000


class Ledger:
    """A fire ledger with ``TriggerStore.history``'s order and exclusive cursor (§9.14):
    newest boundary first, ties by trigger id descending; rows updated in place."""

    def __init__(self) -> None:
        self.rows: dict[tuple[str, int], FireRecord] = {}
        self.reads = 0

    def put(self, trigger_id: str, occurrence: int, outcome: Outcome | None, run: str = "") -> None:
        self.rows[(trigger_id, occurrence)] = FireRecord(
            trigger_id=trigger_id, occurrence=occurrence, outcome=outcome, run_id=run or None
        )

    async def history(self, query: HistoryQuery | None = None) -> HistoryPage:
        await trio.lowlevel.checkpoint()
        self.reads += 1
        q = query if query is not None else HistoryQuery()
        rows = sorted(self.rows.values(), key=lambda r: (r.occurrence, r.trigger_id), reverse=True)
        rows = [r for r in rows if q.trigger_id is None or r.trigger_id == q.trigger_id]
        rows = [r for r in rows if q.outcome is None or r.outcome == q.outcome]
        if q.cursor is not None:
            c = q.cursor
            rows = [
                r
                for r in rows
                if r.occurrence < c.occurrence
                or (r.occurrence == c.occurrence and r.trigger_id < c.trigger_id)
            ]
        if q.limit is not None and len(rows) > q.limit:
            kept = rows[: q.limit]
            last = kept[-1]
            return HistoryPage(
                items=kept, next_cursor=Fire(trigger_id=last.trigger_id, occurrence=last.occurrence)
            )
        return HistoryPage(items=rows)


def _shown(records: list[FireRecord]) -> list[tuple[str, int, str | None]]:
    return [(r.trigger_id, r.occurrence, r.outcome) for r in records]


async def test_rows_sharing_a_boundary_are_each_printed_once() -> None:
    ledger = Ledger()
    follower = Follower(ledger, trigger_id=None, window_ms=10 * MINUTE)
    ledger.put("b", 0, "completed", "r0")
    assert _shown(await follower.poll()) == [("b", 0, "completed")]
    # Three triggers on one boundary, written across two polls: a cursor past "the last
    # occurrence printed" would miss the late ones (>) or repeat the early ones (>=).
    ledger.put("b", MINUTE, "launched", "r1")
    assert _shown(await follower.poll()) == [("b", MINUTE, "launched")]
    ledger.put("a", MINUTE, "launched", "r2")
    ledger.put("c", MINUTE, "skipped")
    assert _shown(await follower.poll()) == [("a", MINUTE, "launched"), ("c", MINUTE, "skipped")]
    assert await follower.poll() == []


async def test_an_outcome_change_is_printed_again_and_only_once() -> None:
    ledger = Ledger()
    follower = Follower(ledger, trigger_id=None, window_ms=10 * MINUTE)
    ledger.put("a", MINUTE, None, "reservation")
    assert _shown(await follower.poll()) == [("a", MINUTE, None)]  # the printer drops it
    ledger.put("a", MINUTE, "launched", "r1")
    assert _shown(await follower.poll()) == [("a", MINUTE, "launched")]
    ledger.put("a", MINUTE, "completed", "r1")
    assert _shown(await follower.poll()) == [("a", MINUTE, "completed")]
    assert await follower.poll() == []


async def test_a_long_run_below_the_window_still_prints_its_completion() -> None:
    ledger = Ledger()
    follower = Follower(ledger, trigger_id=None, window_ms=10 * MINUTE)
    ledger.put("slow", 0, "launched", "r-slow")
    ledger.put("fast", 0, "completed", "r-fast")
    await follower.poll()
    for minute in range(1, 31):  # half an hour of another trigger: "slow" falls far behind
        ledger.put("fast", minute * MINUTE, "completed", f"r{minute}")
        await follower.poll()
    assert follower.horizon == 20 * MINUTE
    assert ("slow", 0) in follower.lagging
    assert ("fast", 0) not in follower.seen  # settled rows below the horizon are forgotten
    ledger.put("slow", 0, "completed", "r-slow")
    assert _shown(await follower.poll()) == [("slow", 0, "completed")]
    assert follower.lagging == {}
    assert await follower.poll() == []


async def test_a_poll_pages_down_to_the_horizon_and_no_further() -> None:
    ledger = Ledger()
    for second in range(1200):  # 20 minutes of an every-second trigger
        ledger.put("s", second * 1000, "completed", f"r{second}")
    follower = Follower(ledger, trigger_id=None, window_ms=5 * MINUTE)
    first = await follower.poll()
    assert len(first) == 301  # boundaries 899 s ... 1199 s: the window, its lower edge included
    assert first[0].occurrence == 899_000
    assert first[-1].occurrence == 1_199_000
    reads = ledger.reads
    assert await follower.poll() == []
    assert ledger.reads - reads == 1  # 301 rows: one page of 500


async def test_the_trigger_filter_is_the_stores() -> None:
    ledger = Ledger()
    follower = Follower(ledger, trigger_id="a", window_ms=MINUTE)
    ledger.put("a", 0, "completed", "r0")
    ledger.put("b", 0, "completed", "r1")
    assert _shown(await follower.poll()) == [("a", 0, "completed")]


# --- the command, in subprocesses ----------------------------------------------------------

BOUND_S = 60.0
"""How long the subprocess steps may take before the test gives up (a bound, never expected)."""


def _lines(stream: Any, into: queue.Queue[str | None]) -> None:
    for line in stream:
        into.put(line)
    into.put(None)


HOLD = "import os, time\nwhile not os.path.exists('release'): time.sleep(0.05)"
"""The flow of the follow test: it runs until the test creates ``release`` beside the config,
so the follower sees the run ``launched`` before it is ``completed``, whatever the load."""


def _config(tmp_path: Path, code: str = "pass") -> Path:
    config = tmp_path / "triggers.toml"
    config.write_text(
        f"""
database = "t.sqlite"

[flows.quick]
command = [{json.dumps(sys.executable)}, "-c", {json.dumps(code)}]

[[triggers]]
id = "every-second"
flow = "quick"
cron = "* * * * * *"
"""
    )
    return config


def test_follow_prints_launches_and_completions_until_sigint(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    config = _config(tmp_path)
    database = tmp_path / "t.sqlite"
    seed = ["--id", "seed", "--flow", "quick", "--cron", "0 0 1 1 *"]
    assert main(["add", "--db", str(database), *seed]) == 0
    capsys.readouterr()
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)}
    cli = [sys.executable, "-m", "trio_triggers.cli"]
    follower = subprocess.Popen(
        [*cli, "history", "--db", str(database), "--follow", "--json", "--interval", "200ms"],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=env,
    )
    lines: queue.Queue[str | None] = queue.Queue()
    threading.Thread(target=_lines, args=(follower.stdout, lines), daemon=True).start()
    serving = subprocess.Popen(
        [*cli, "run", "--config", str(config), "--for", f"{BOUND_S}s", "--quiet"],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
        env=env,
    )
    rows: list[dict[str, Any]] = []
    try:
        deadline = time.monotonic() + BOUND_S
        while not _a_whole_run(rows) and time.monotonic() < deadline:
            try:
                line = lines.get(timeout=1.0)
            except queue.Empty:
                continue
            if line is None:
                break
            rows.append(json.loads(line))
            if rows[-1]["outcome"] == "launched":
                (tmp_path / "release").touch()  # let the runs end: each prints completed
        serving.send_signal(signal.SIGINT)
        _, served_err = serving.communicate(timeout=BOUND_S)
        assert serving.returncode == 0, served_err
    finally:
        follower.send_signal(signal.SIGINT)
        try:
            _, err = follower.communicate(timeout=BOUND_S)
        finally:
            follower.kill()
            serving.kill()
    assert follower.returncode == 0, err
    assert "Traceback" not in err
    assert _a_whole_run(rows), rows
    assert {r["trigger_id"] for r in rows} == {"every-second"}
    assert set(rows[0]) == {
        "trigger_id",
        "occurrence",
        "occurrence_iso",
        "outcome",
        "run_id",
        "error",
        "run_error",
        "manual_key",
    }
    printed = [(r["occurrence"], r["outcome"]) for r in rows]
    assert len(printed) == len(set(printed))  # each row once per outcome


def _a_whole_run(rows: list[dict[str, Any]]) -> bool:
    """Whether ``rows`` hold one boundary's ``launched`` line and, after it, its ``completed``."""
    launched: set[int] = set()
    for row in rows:
        if row["outcome"] == "launched":
            launched.add(row["occurrence"])
        elif row["outcome"] == "completed" and row["occurrence"] in launched:
            return True
    return False


FOLLOW_COMPLETED_2 = ["--outcome", "completed", "--json", "--limit", "2"]


def test_follow_prints_the_backlog_oldest_first_and_stops_on_a_closed_pipe(
    tmp_path: Path,
) -> None:
    config = _config(tmp_path)
    database = tmp_path / "t.sqlite"
    assert main(["run", "--config", str(config), "--for", "2.5s", "--quiet"]) == 0
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)}
    cli = [sys.executable, "-m", "trio_triggers.cli"]
    done = subprocess.run(
        [*cli, "history", "--db", str(database), "--json", "--outcome", "completed"],
        capture_output=True,
        text=True,
        env=env,
        timeout=BOUND_S,
        check=True,
    )
    newest_first = [r["occurrence"] for r in json.loads(done.stdout)]
    assert len(newest_first) >= 2
    follower = subprocess.Popen(
        [*cli, "history", "--db", str(database), "--follow", *FOLLOW_COMPLETED_2],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=env,
    )
    try:
        assert follower.stdout is not None
        backlog = [json.loads(follower.stdout.readline()) for _ in range(2)]
        follower.stdout.close()  # the reader goes away: the next write meets a closed pipe
        assert [r["occurrence"] for r in backlog] == sorted(newest_first[:2])
        # Nothing new is written, so nothing is printed: make one new row appear.
        assert main(["run", "--config", str(config), "--for", "2s", "--quiet"]) == 0
        _, err = follower.communicate(timeout=BOUND_S)
    finally:
        follower.kill()
    assert follower.returncode == 141, err
    assert "stdout was closed" in err
    assert "Traceback" not in err


def test_interval_and_window_need_follow(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    database = tmp_path / "t.sqlite"
    assert (
        main(["add", "--db", str(database), "--id", "x", "--flow", "f", "--cron", "0 0 * * *"]) == 0
    )
    capsys.readouterr()
    assert main(["history", "--db", str(database), "--interval", "1s"]) == 2
    assert "--interval needs --follow" in capsys.readouterr().err
    assert main(["history", "--db", str(database), "--follow", "--window", "soon"]) == 2
    assert "--window: not a duration" in capsys.readouterr().err
