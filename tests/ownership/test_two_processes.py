"""Two processes, one SQLite file: B takes over a run whose owner A is frozen (SIGSTOP).

Real time and real processes. The contract fixes the stale cutoff at 30 s; B's store is built
with ``stale_after_ms=2_000`` (a test knob of the stores, see docs/ownership.md) so the test
takes a few seconds. A keeps the production loop (19 s tolerance) and never notices the stop
until it is resumed: its next pulse finds the fence gone.
"""

from __future__ import annotations

import json
import os
import signal
import sqlite3
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import trio

from trio_triggers import SystemWallClock
from trio_triggers._ownership import (
    Activated,
    LivenessContext,
    LivenessEvidence,
    OwnerId,
    Transitioned,
    Updated,
    lease_liveness,
    open_sqlite_run_store,
    same_host_pid_probe,
)

SCRIPT = Path(__file__).with_name("_owner_process.py")
STALE_MS = 2_000

pytestmark = pytest.mark.skipif(not hasattr(signal, "SIGSTOP"), reason="needs POSIX signals")


class Lines:
    def __init__(self, stream: trio.abc.ReceiveStream) -> None:
        self.stream = stream
        self.buffer = b""

    async def next(self) -> dict[str, Any]:
        with trio.fail_after(20):
            while b"\n" not in self.buffer:
                chunk = await self.stream.receive_some()
                if not chunk:
                    raise EOFError("process A closed its output")
                self.buffer += chunk
        line, self.buffer = self.buffer.split(b"\n", 1)
        decoded: dict[str, Any] = json.loads(line)
        return decoded


def write_lock_is_free(path: str) -> bool:
    probe = sqlite3.connect(path, timeout=0, isolation_level=None)
    try:
        probe.execute("BEGIN IMMEDIATE")
        probe.execute("ROLLBACK")
        return True
    except sqlite3.OperationalError:
        return False
    finally:
        probe.close()


def is_stopped(pid: int) -> bool | None:
    """Whether Linux reports ``pid`` as stopped (``None`` without ``/proc``)."""
    try:
        with open(f"/proc/{pid}/stat") as stat:
            fields = stat.read().rsplit(")", 1)[1].split()
    except FileNotFoundError:
        return None
    return fields[0] in ("T", "t")


async def stopped(pid: int) -> None:
    """Wait until the kernel has actually stopped the process (or pause without ``/proc``)."""
    with trio.fail_after(5):
        while True:
            state = is_stopped(pid)
            if state is None:
                await trio.sleep(0.1)
                return
            if state:
                return
            await trio.sleep(0.001)


async def freeze_outside_a_transaction(pid: int, path: str) -> None:
    """SIGSTOP A, but never while it holds the write lock (B could then never write)."""
    while True:
        os.kill(pid, signal.SIGSTOP)
        await stopped(pid)
        if write_lock_is_free(path):
            return
        os.kill(pid, signal.SIGCONT)
        await trio.sleep(0.01)


@pytest.mark.slow
async def test_takeover_of_a_frozen_owner(tmp_path: Path) -> None:
    path = str(tmp_path / "runs.sqlite")
    host = "two-process-host"
    clock = SystemWallClock()
    b = OwnerId.for_this_process(host)
    async with open_sqlite_run_store(path, clock=clock, stale_after_ms=STALE_MS) as store:
        await store.create("r", "{}")
        proc = await trio.lowlevel.open_process(
            [sys.executable, str(SCRIPT), path, "r", host], stdout=subprocess.PIPE
        )
        try:
            assert proc.stdout is not None
            lines = Lines(proc.stdout)
            assert (await lines.next())["owned"] == "Activated"
            await trio.sleep(1.5)  # at least one real heartbeat
            await freeze_outside_a_transaction(proc.pid, path)
            while True:  # wait, by B's clock, until A's stamp is stale
                row = await store.get("r")
                assert row.owner is not None
                assert row.heartbeat_at_ms is not None
                now = clock.now_ms()
                if row.heartbeat_at_ms < now - STALE_MS:
                    break
                await trio.sleep(0.1)
            a = row.owner
            context = LivenessContext(claimant=b, heartbeat_at_ms=row.heartbeat_at_ms, now_ms=now)
            # A frozen process is alive to a pid probe; only the expired lease can decide.
            assert await same_host_pid_probe(a, context) is True
            assert await lease_liveness(STALE_MS / 1000)(a, context) is False
            evidence = LivenessEvidence(expected_owner=a, checked_at_ms=now, kind="lease-expired")
            assert await store.claim_and_own("r", row, b, now, evidence) == Activated()
            os.kill(proc.pid, signal.SIGCONT)
            assert (await lines.next()) == {"lease_lost": "fence_lost"}
            assert (await lines.next()) == {"heartbeat": "FenceLost", "transition": "FenceLost"}
            with trio.fail_after(20):
                assert await proc.wait() == 0
            assert await store.heartbeat("r", b, clock.now_ms()) == Updated()
            assert await store.transition_owned("r", b, "completed", result_json='"from B"') == (
                Transitioned()
            )
            final = await store.get("r")
            assert (final.status, final.result_json, final.owner) == (
                "completed",
                '"from B"',
                None,
            )
        finally:
            if proc.returncode is None:
                os.kill(proc.pid, signal.SIGCONT)
                proc.kill()
                await proc.wait()
