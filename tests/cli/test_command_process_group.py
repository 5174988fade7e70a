"""A cancelled command flow leaves no process behind (issue 18: process groups).

Real processes, so real time with short bounds. ``sh -c 'sleep 37 & sleep 37'`` starts two
children; cancelling the run must end all three (the ``sh`` and both ``sleep``s), counted by
the command's process group in ``/proc``.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import TYPE_CHECKING

import pytest
import trio

from tests.cli.flow_support import context
from trio_triggers.cli._flows import CommandFlow

if TYPE_CHECKING:
    from collections.abc import Sequence

pytestmark = pytest.mark.skipif(not Path("/proc/self/stat").exists(), reason="needs /proc")


def live_members(pgid: int) -> list[int]:
    """The processes of group ``pgid`` that are alive (zombies waiting for a reaper are not)."""
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            stat = (entry / "stat").read_text()
        except OSError:
            continue
        # "pid (comm) state ppid pgrp ...": comm may hold spaces, so split after its ")".
        fields = stat[stat.rindex(")") + 2 :].split()
        if int(fields[2]) == pgid and fields[0] != "Z":
            found.append(int(entry.name))
    return found


async def start_then_cancel(argv: Sequence[str], pidfile: Path, kill_grace: float) -> int:
    """Run ``argv`` until it wrote its pid and its group has three members, then cancel it."""
    flow = CommandFlow(argv, kill_grace=kill_grace)
    with trio.fail_after(20):
        async with trio.open_nursery() as nursery:
            nursery.start_soon(flow, None, context())
            while not pidfile.exists() or not pidfile.read_text().strip():
                await trio.sleep(0.02)
            pgid = int(pidfile.read_text())
            while len(live_members(pgid)) < 3:
                await trio.sleep(0.02)
            nursery.cancel_scope.cancel()
    return pgid


async def gone(pgid: int) -> list[int]:
    with trio.move_on_after(5):
        while live_members(pgid):
            await trio.sleep(0.05)
    return live_members(pgid)


async def test_cancelling_a_command_ends_its_whole_process_group(tmp_path: Path) -> None:
    pidfile = tmp_path / "pid"
    script = f"echo $$ > {pidfile}; sleep 37 & sleep 37"
    pgid = await start_then_cancel(["sh", "-c", script], pidfile, kill_grace=5)
    assert await gone(pgid) == []


async def test_children_that_ignore_sigterm_are_killed_after_the_grace(tmp_path: Path) -> None:
    pidfile = tmp_path / "pid"
    # Both children ignore SIGTERM: only the SIGKILL after the grace ends them.
    script = f"echo $$ > {pidfile}; trap '' TERM; sleep 37 & sleep 37"
    began = trio.current_time()
    pgid = await start_then_cancel(["sh", "-c", script], pidfile, kill_grace=0.5)
    assert await gone(pgid) == []
    assert trio.current_time() - began >= 0.5


def test_kill_grace_must_be_a_non_negative_number() -> None:
    with pytest.raises(ValueError, match="kill_grace"):
        CommandFlow(["true"], kill_grace=-1)
    assert CommandFlow(["true"]).kill_grace == 5.0
    assert os.name == "posix"
