"""``trio-triggers run`` as a real process: SIGKILL mid-run, restart, SIGINT (real time)."""

from __future__ import annotations

import json
import os
import signal
import sqlite3
import subprocess
import sys
import time
from typing import TYPE_CHECKING

import pytest

if TYPE_CHECKING:
    from pathlib import Path

pytestmark = pytest.mark.skipif(os.name != "posix", reason="POSIX signals and sh")

# The command records each attempt, works for 0.4 s, then appends its idempotency key to
# out.log unless it is already there: the side effect is idempotent, so an at-least-once re-run
# of a run whose process died cannot duplicate it.
CONFIG = """
[runner]
poll_interval = 0.2
lease_stale_after = 2

[scheduler]
poll_interval = 0.2
run_poll_interval = 0.1

[flows.append]
command = ["sh", "-c", '''
echo "$TT_IDEMPOTENCY_KEY" >> started.log
sleep 0.4
grep -qxF "$TT_IDEMPOTENCY_KEY" out.log 2>/dev/null || echo "$TT_IDEMPOTENCY_KEY" >> out.log
''']

[[triggers]]
id = "tick"
flow = "append"
cron = "* * * * * *"
timezone = "UTC"
catch_up = "all"
max_catch_up = 100
"""


CLI = (sys.executable, "-m", "trio_triggers.cli")


def _cli(*args: str, cwd: Path) -> subprocess.Popen[str]:
    return subprocess.Popen(
        [*CLI, *args],
        cwd=cwd,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        start_new_session=True,  # its own process group: SIGKILL takes the flows down too
    )


def _lines(path: Path) -> list[str]:
    return path.read_text().splitlines() if path.exists() else []


def _wait_for(predicate: object, timeout: float) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if predicate():  # type: ignore[operator]
            return
        time.sleep(0.05)
    raise AssertionError("condition not reached in time")


def test_sigkill_mid_run_then_restart_runs_every_boundary_once(tmp_path: Path) -> None:
    config = tmp_path / "triggers.toml"
    config.write_text(CONFIG)
    started, out = tmp_path / "started.log", tmp_path / "out.log"

    first = _cli("run", "--config", str(config), cwd=tmp_path)

    def in_flight() -> bool:
        attempts = _lines(started)
        return len(attempts) >= 3 and attempts[-1] not in _lines(out)

    try:
        _wait_for(in_flight, 15)
        killed_key = _lines(started)[-1]
        time.sleep(0.1)
    finally:
        os.killpg(first.pid, signal.SIGKILL)
        first.communicate()
    assert first.returncode == -signal.SIGKILL
    assert killed_key not in _lines(out)

    second = _cli("run", "--config", str(config), "--json", cwd=tmp_path)
    try:
        # the killed run is taken over once its 2 s lease expires, and re-run
        _wait_for(lambda: killed_key in _lines(out), 12)
        time.sleep(1.0)
        _wait_for(in_flight, 5)  # SIGINT arrives while a flow is running
        interrupted_key = _lines(started)[-1]
    finally:
        second.send_signal(signal.SIGINT)
        stdout, stderr = second.communicate(timeout=15)
    assert second.returncode == 0, stderr
    assert "SIGINT: stopping cleanly" in stderr
    events = [json.loads(line) for line in stdout.splitlines() if line.startswith("{")]
    assert any(e["outcome"] == "completed" for e in events)

    history = subprocess.run(
        [*CLI, "history", "--config", str(config), "--json", "--limit", "500"],
        capture_output=True,
        text=True,
        check=True,
    )
    records = json.loads(history.stdout)
    occurrences = sorted(r["occurrence"] for r in records)
    # every one-second boundary of the window is in the ledger exactly once
    assert occurrences == list(range(occurrences[0], occurrences[-1] + 1000, 1000))
    assert len({r["run_id"] for r in records if r["run_id"]}) == len(
        [r for r in records if r["run_id"]]
    )
    assert not [r for r in records if r["outcome"] == "failed"]
    completed = sorted(
        f"tick:{r['occurrence_iso']}" for r in records if r["outcome"] == "completed"
    )
    written = _lines(out)
    assert sorted(written) == completed  # each completed key exactly once in the file
    assert len(written) == len(set(written))
    assert killed_key in completed
    assert _lines(started).count(killed_key) >= 2  # executed again: at-least-once

    with sqlite3.connect(tmp_path / "trio-triggers.sqlite") as db:
        statuses = dict(db.execute("SELECT status, count(*) FROM tt_runs GROUP BY status"))
        handed_back = [
            k
            for (k,) in db.execute("SELECT idempotency_key FROM tt_runs WHERE status = 'suspended'")
        ]
    assert "failed" not in statuses  # SIGINT stopped runs without failing them
    assert set(statuses) <= {"completed", "suspended"}
    assert handed_back == [interrupted_key]  # the run in flight at SIGINT, for the next start

    # the next start picks the handed-back run up at once (no lease to wait for) and finishes it
    third = _cli("run", "--config", str(config), "--for", "2s", "--quiet", cwd=tmp_path)
    _, stderr = third.communicate(timeout=20)
    assert third.returncode == 0, stderr
    assert interrupted_key in _lines(out)
    assert _lines(out).count(interrupted_key) == 1
    with sqlite3.connect(tmp_path / "trio-triggers.sqlite") as db:
        (status,) = db.execute(
            "SELECT status FROM tt_runs WHERE idempotency_key = ?", (interrupted_key,)
        ).fetchone()
    assert status == "completed"
