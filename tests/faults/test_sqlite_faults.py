"""SQLite faults with two real ``trio-triggers run`` processes: a lock held by another program,
and a full disk (docs/faults.md).

Each experiment serves 20 every-second triggers from two processes, applies the fault, lifts it,
and asserts on what the flow logged itself and on the ledger: every boundary of the window is in
the ledger, no key executed twice or concurrently, service resumed within the stated bound, and
the outage was reported in one line when it began and one when it ended, not a flood.
"""

from __future__ import annotations

import contextlib
import re
import sqlite3
import subprocess
import time
from collections import Counter
from typing import TYPE_CHECKING

import pytest

from tests.faults.experiment import REAL_TIME, Experiment, Report

if TYPE_CHECKING:
    from collections.abc import Iterator
    from pathlib import Path

pytestmark = REAL_TIME

#: The stated bound: a process serves again within this many seconds of the fault's end.
RECOVERY_S = 5.0


def _assert_nothing_lost(report: Report) -> None:
    assert report.lost == [], report.line()
    assert report.duplicates == [], report.line()
    assert report.concurrent == [], report.line()


#: How many times one failure may be logged with its traceback for one subject (the process's
#: scheduler, a trigger, a run): once when an outage begins, and once more if it begins again
#: (the same tolerance as for the scheduler's own outage line).
TRACEBACKS_PER_SUBJECT = 2

_RECORD = re.compile(r"^\d{4}-\d\d-\d\d \d\d:\d\d:\d\d,\d{3} (?P<head>\S+ \S+ .*)$")
_EXTRA = re.compile(r" [a-z_]+=")
_SUBJECT = re.compile(r"\b(?:host|trigger_id|run_id)=\S+")


def _logged_tracebacks(log: str) -> Counter[tuple[str, ...]]:
    """The log records of one process's stderr that carry a traceback, by what failed and what
    for: ``(level, logger and message with numbers blanked, host=..., trigger_id=..., run_id=...)``.
    A record with chained exceptions counts once; a traceback outside any record (printed
    directly) counts under ``("unlogged",)``."""
    found: Counter[tuple[str, ...]] = Counter()
    key: tuple[str, ...] = ("unlogged",)
    counted = False
    for line in log.splitlines():
        record = _RECORD.match(line)
        if record is not None:
            head = record.group("head")
            message = _EXTRA.split(head, maxsplit=1)[0]
            key = (re.sub(r"\d+", "#", message), *sorted(_SUBJECT.findall(head)))
            counted = False
        elif line.startswith("-- "):  # the CLI's own lines ("-- serving ...")
            key, counted = ("unlogged",), False
        elif line.startswith("Traceback (most recent call last):") and not counted:
            found[key] += 1
            counted = True
    return found


def _assert_no_traceback_flood(experiment: Experiment, processes: int) -> None:
    """An outage is reported once per thing it interrupted, not once per attempt.

    How many tracebacks an outage legitimately logs depends on how much work it caught in
    flight: each run monitor whose completion could not be written, each trigger whose tick
    failed, each launch, says so once with its traceback. On a loaded machine more of that work
    is in flight when the disk fills (40 tracebacks were seen where an idle one logs 8), so a
    fixed total cannot tell a slow machine from a flood. A flood is the same failure logged again
    for the same subject on every retry, tick or write (the scheduler retries a failed tick
    about twice a second, a runner retries a write every half second): that is what is bounded,
    so the total is at most TRACEBACKS_PER_SUBJECT times the number of things that failed."""
    for index in range(processes):
        found = _logged_tracebacks(experiment.stderr(index))
        repeated = {key: count for key, count in found.items() if count > TRACEBACKS_PER_SUBJECT}
        assert repeated == {}, (index, repeated, sum(found.values()))


def _after(experiment: Experiment, instant: float) -> bool:
    return any(e.start > instant for e in experiment.executions())


def test_a_lock_held_by_another_process_is_waited_out_and_named(tmp_path: Path) -> None:
    database = tmp_path / "tt.sqlite"
    experiment = Experiment(tmp_path, str(database))
    try:
        experiment.start(2)
        experiment.wait_until_serving()
        first = time.time()
        time.sleep(2)
        blocker = sqlite3.connect(database, isolation_level=None, timeout=10)
        blocker.execute("BEGIN EXCLUSIVE")  # as another program's long write would
        time.sleep(15)
        blocker.execute("ROLLBACK")
        blocker.close()
        released = time.time()
        recovery, ended = experiment.recover_then_serve(
            lambda: _after(experiment, released), "service after the lock", serve_s=6
        )
        last = ended - 2
        codes = experiment.stop()
    finally:
        experiment.kill_all()
    report = experiment.report(first, last)
    print(f"SQLite locked 15 s: {report.line()}; recovery {recovery:.2f} s")
    assert codes == [0, 0]
    _assert_nothing_lost(report)
    assert recovery < RECOVERY_S
    for index in range(2):
        log = experiment.stderr(index)
        # One line when the wait begins, naming the file and the lock, one when it ends.
        assert f"SQLite database {database} is locked by another connection" in log
        assert log.count("is locked by another connection") <= 3, log
        assert f"SQLite database {database} is free again after" in log


@contextlib.contextmanager
def _small_disk(where: Path, size: str) -> Iterator[Path]:
    where.mkdir()
    mounted = subprocess.run(
        ["mount", "-t", "tmpfs", "-o", f"size={size}", "tmpfs", str(where)],
        capture_output=True,
        text=True,
        check=False,
    )
    if mounted.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs here (needs root): {mounted.stderr.strip()}")
    try:
        yield where
    finally:
        subprocess.run(["umount", "-l", str(where)], check=False)


def _fill(disk: Path) -> Path:
    filler = disk / "filler"
    with filler.open("wb", buffering=0) as file:
        try:
            while True:
                file.write(b"\0" * 65536)
        except OSError:
            pass  # ENOSPC: the disk is full
    return filler


def test_a_full_disk_is_reported_survived_and_loses_nothing_committed(tmp_path: Path) -> None:
    with _small_disk(tmp_path / "disk", "16m") as disk:
        database = disk / "tt.sqlite"
        experiment = Experiment(tmp_path, str(database))
        try:
            experiment.start(2)
            experiment.wait_until_serving()
            first = time.time()
            time.sleep(2)
            filler = _fill(disk)
            committed, _ = experiment.ledger()
            time.sleep(8)
            filler.unlink()
            freed = time.time()
            recovery, ended = experiment.recover_then_serve(
                lambda: _after(experiment, freed), "service after the disk", serve_s=6
            )
            last = ended - 2
            codes = experiment.stop()
        finally:
            experiment.kill_all()
        with contextlib.closing(sqlite3.connect(database)) as connection:
            integrity = connection.execute("PRAGMA integrity_check").fetchall()
        report = experiment.report(first, last)
        after, _ = experiment.ledger()
    print(f"SQLite disk full 8 s: {report.line()}; recovery {recovery:.2f} s")
    assert integrity == [("ok",)]
    assert codes == [0, 0]
    _assert_nothing_lost(report)
    assert recovery < RECOVERY_S
    # Every ledger row committed before the disk filled is still there.
    assert set(committed) <= set(after)
    failures = [experiment.stderr(i).count("A trigger scheduler tick failed") for i in range(2)]
    logs = experiment.stderr(0) + experiment.stderr(1)
    # The cause is said in the database's own words, and an outage is a line, not a flood: the
    # scheduler pauses between failed ticks (without it: thousands of tracebacks a second).
    assert "database or disk is full" in logs
    assert sum(failures) >= 1
    assert max(failures) <= 2, failures
    _assert_no_traceback_flood(experiment, 2)
