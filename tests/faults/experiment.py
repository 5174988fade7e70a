"""The fault experiments' harness: real ``trio-triggers run`` processes and an independent log.

An :class:`Experiment` writes a config with ``triggers`` every-second triggers and a Python flow
(``faultflow.py`` next to the config) that records every execution *outside the library*: a
``begin`` line when it starts and an ``end`` line when it finishes (``finally``: ``done`` or
``stopped`` part-way), each appended with ``O_APPEND`` and ``fsync``, so a process that dies
or is frozen leaves what it did on disk. While it runs the flow also appends one ``step`` line per
``step_seconds`` of work: the side effects a fenced owner must stop making.

:meth:`Experiment.report` reads that log and the ledger (SQLite or PostgreSQL) and answers the
figures each experiment asserts on: boundaries of the window, ledger rows by outcome,
executions, keys executed more than once, keys executed concurrently, and boundaries lost (no
ledger row and not counted as missed).
"""

from __future__ import annotations

import contextlib
import itertools
import math
import os
import signal
import sqlite3
import subprocess
import sys
import time
from collections import Counter
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

import pytest

if TYPE_CHECKING:
    from collections.abc import Callable
    from pathlib import Path

__all__ = ["REAL_TIME", "Execution", "Experiment", "Report", "wait_for"]

#: The marks of an experiment: each takes 20-60 s of real time, so it runs where the soak does
#: (``TT_RUN_SLOW=1``, which ``.ci/run`` sets; ``nox -s soak``).
REAL_TIME = [
    pytest.mark.slow,
    pytest.mark.skipif(
        os.environ.get("TT_RUN_SLOW", "") in ("", "0") or os.name != "posix",
        reason="a real-time fault experiment (POSIX): set TT_RUN_SLOW=1 to run it",
    ),
]

CLI = (sys.executable, "-m", "trio_triggers.cli")

FLOW = """
import os
import time

import trio

LOG = os.path.join(os.path.dirname(os.path.abspath(__file__)), "executions.log")


def _append(line):
    fd = os.open(LOG, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
    try:
        os.write(fd, line.encode())
        os.fsync(fd)
    finally:
        os.close(fd)


async def record(input, run):
    who = f"{run.idempotency_key},{run.run_id},{os.getpid()}"
    start = time.time()
    _append(f"begin,{who},{start:.6f}\\n")
    status = "stopped"
    try:
        for _ in range(int(input["steps"])):
            await trio.sleep(float(input["step_seconds"]))
            _append(f"step,{who},{time.time():.6f}\\n")
        status = "done"
    finally:
        _append(f"end,{who},{start:.6f},{time.time():.6f},{status}\\n")
    return {"pid": os.getpid()}
"""


def wait_for(predicate: Callable[[], bool], timeout: float, what: str) -> float:
    """Poll ``predicate`` (real time) until true; answer the seconds it took."""
    began = time.monotonic()
    while time.monotonic() - began < timeout:
        if predicate():
            return time.monotonic() - began
        time.sleep(0.05)
    raise AssertionError(f"not within {timeout} s: {what}")


@dataclass
class Execution:
    """One execution of the flow, as the flow itself logged it."""

    key: str
    run_id: str
    pid: int
    start: float
    end: float | None = None  # None: the process died (or is frozen) before the flow ended
    steps: list[float] = field(default_factory=list)
    #: Whether the flow did all its steps (not stopped part-way: a lost lease, a stop).
    done: bool = False


@dataclass
class Report:
    """What one experiment measured (see the module docstring)."""

    boundaries: int
    outcomes: Counter[str]
    executions: int
    duplicates: list[str]
    concurrent: list[str]
    lost: list[str]
    missed: int

    def line(self) -> str:
        outcomes = ", ".join(f"{k} {v}" for k, v in sorted(self.outcomes.items()))
        return (
            f"boundaries {self.boundaries}; ledger {outcomes}; executions {self.executions};"
            f" duplicate keys {len(self.duplicates)}; concurrent keys {len(self.concurrent)};"
            f" lost {len(self.lost)}; missed {self.missed}"
        )


class Experiment:
    """Config, processes and measurements of one fault experiment."""

    def __init__(
        self,
        root: Path,
        database: str,
        *,
        triggers: int = 20,
        steps: int = 2,
        step_seconds: float = 0.1,
        lease_stale_after: float = 3.0,
        extra_config: str = "",
    ) -> None:
        self.root = root
        self.database = database
        self.config = root / "triggers.toml"
        self.log = root / "executions.log"
        self.processes: list[subprocess.Popen[str]] = []
        self.trigger_ids = [f"t{i:02d}" for i in range(triggers)]
        (root / "faultflow.py").write_text(FLOW)
        blocks = [
            f"database = {_toml(database)}",
            "",
            "[runner]",
            "concurrency = 8",
            "poll_interval = 0.5",
            f"lease_stale_after = {lease_stale_after}",
            "",
            "[scheduler]",
            "poll_interval = 0.5",
            "run_poll_interval = 0.5",
            "",
            "[flows.record]",
            'python = "faultflow:record"',
            extra_config,
        ]
        for trigger_id in self.trigger_ids:
            blocks += [
                "",
                "[[triggers]]",
                f'id = "{trigger_id}"',
                'flow = "record"',
                'cron = "* * * * * *"',
                'timezone = "UTC"',
                'catch_up = "all"',
                "max_catch_up = 1000",
                f"input = {{ steps = {steps}, step_seconds = {step_seconds} }}",
            ]
        self.config.write_text("\n".join(blocks) + "\n")

    # processes

    def start(self, count: int = 2) -> list[subprocess.Popen[str]]:
        """Start ``count`` ``trio-triggers run`` processes (stderr to ``proc-N.log``)."""
        started = []
        for _ in range(count):
            index = len(self.processes)
            stderr = (self.root / f"proc-{index}.log").open("w")
            process = subprocess.Popen(
                [*CLI, "run", "--config", str(self.config), "--quiet"],
                cwd=self.root,
                stdout=subprocess.DEVNULL,
                stderr=stderr,
                text=True,
                start_new_session=True,
            )
            stderr.close()
            self.processes.append(process)
            started.append(process)
        return started

    def stderr(self, index: int) -> str:
        return (self.root / f"proc-{index}.log").read_text()

    def wait_until_serving(self, executions: int = 20) -> None:
        """Wait (real time, up to 30 s) until the flow has logged ``executions`` executions."""
        wait_for(lambda: len(self.executions()) >= executions, 30, "the first executions")

    def recover_then_serve(
        self, recovered: Callable[[], bool], what: str, *, serve_s: float
    ) -> tuple[float, float]:
        """After a fault ends: wait (up to 30 s) for ``recovered``, serve ``serve_s`` more
        seconds, and answer the seconds recovery took and the wall time serving ended."""
        recovery = wait_for(recovered, 30, what)
        time.sleep(serve_s)
        return recovery, time.time()

    def stop(self, timeout: float = 20.0) -> list[int | None]:
        """SIGINT every process still running, wait; SIGKILL what does not stop in time."""
        for process in self.processes:
            if process.poll() is None:
                with contextlib.suppress(ProcessLookupError):
                    os.killpg(process.pid, signal.SIGCONT)
                process.send_signal(signal.SIGINT)
        deadline = time.monotonic() + timeout
        for process in self.processes:
            try:
                process.wait(max(0.1, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                with contextlib.suppress(ProcessLookupError):
                    os.killpg(process.pid, signal.SIGKILL)
                process.wait()
        return [process.returncode for process in self.processes]

    def kill_all(self) -> None:
        for process in self.processes:
            if process.poll() is None:
                with contextlib.suppress(ProcessLookupError):
                    os.killpg(process.pid, signal.SIGKILL)
                process.wait()

    # measurements

    def executions(self) -> list[Execution]:
        found: dict[tuple[str, str, int, str], Execution] = {}
        order: list[Execution] = []
        lines = self.log.read_text().splitlines() if self.log.exists() else []
        for line in lines:
            kind, key, run_id, pid, *times = line.split(",")
            # begin and end carry the start instant: it names the execution
            if kind == "begin":
                execution = Execution(key, run_id, int(pid), float(times[0]))
                found[(key, run_id, int(pid), times[0])] = execution
                order.append(execution)
            elif kind == "end":
                execution = found[(key, run_id, int(pid), times[0])]
                execution.end = float(times[1])
                execution.done = times[2] == "done"
            else:
                latest = [e for e in order if (e.key, e.pid) == (key, int(pid))][-1]
                latest.steps.append(float(times[0]))
        return order

    def ledger(self) -> tuple[dict[tuple[str, int], str], int]:
        """``{(trigger, boundary s): outcome}`` and the missed counters' total."""
        fires = "SELECT trigger_id, occurrence_at_ms, outcome FROM tt_trigger_fires"
        missed = (
            "SELECT COALESCE(SUM(missed_catch_up + missed_overlap + missed_paused), 0)"
            " FROM tt_triggers"
        )
        if self.database.startswith("postgresql://"):
            import psycopg

            with psycopg.connect(self.database, autocommit=True) as conn:
                rows = conn.execute(fires.encode()).fetchall()
                total = conn.execute(missed.encode()).fetchone()
        else:
            with contextlib.closing(sqlite3.connect(self.database, timeout=30)) as conn:
                rows = conn.execute(fires).fetchall()
                total = conn.execute(missed).fetchone()
        ledger = {(str(t), int(at) // 1000): str(outcome) for t, at, outcome in rows}
        return ledger, int(total[0]) if total is not None else 0

    def report(self, first: float, last: float) -> Report:
        """The figures for the boundaries in ``[first, last]`` (epoch seconds, inclusive)."""
        seconds = range(math.ceil(first), math.floor(last) + 1)
        ledger, missed = self.ledger()
        window = {(t, s) for t in self.trigger_ids for s in seconds}
        outcomes = Counter(ledger[b] for b in window if b in ledger)
        lost = sorted(f"{t}@{s}" for t, s in window if (t, s) not in ledger)
        executions = self.executions()
        finished = Counter(e.key for e in executions if e.done)
        by_key: dict[str, list[Execution]] = {}
        for execution in executions:
            by_key.setdefault(execution.key, []).append(execution)
        concurrent = sorted(key for key, runs in by_key.items() if _overlap(runs))
        return Report(
            boundaries=len(window),
            outcomes=outcomes,
            executions=len(executions),
            duplicates=sorted(k for k, n in finished.items() if n > 1),
            concurrent=concurrent,
            lost=lost,
            missed=missed,
        )


def _overlap(runs: list[Execution]) -> bool:
    """Whether two executions of one key were working at once.

    An execution works from its start to its last logged effect: its end if it did all its
    steps, else its last step (it was stopped, died or froze there; what its ``finally`` did
    while unwinding is no work of the flow's).
    """
    spans = sorted(
        (e.start, max([e.start, *e.steps, *([e.end] if e.done and e.end else [])])) for e in runs
    )
    return any(later[0] < earlier[1] for earlier, later in itertools.pairwise(spans))


def _toml(text: str) -> str:
    return '"' + text.replace("\\", "\\\\").replace('"', '\\"') + '"'
