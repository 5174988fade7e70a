"""``trio-triggers demo``: the simulated week shows every policy, the crash and the DST night."""

from __future__ import annotations

import json
import re
from typing import TYPE_CHECKING

from trio_triggers.cli import main

if TYPE_CHECKING:
    import pytest


def test_demo_timeline_covers_policies_crash_catch_up_and_dst(
    capsys: pytest.CaptureFixture[str],
) -> None:
    assert main(["demo"]) == 0
    out = capsys.readouterr().out
    lines = out.splitlines()

    def rows(trigger: str, outcome: str) -> list[str]:
        return [line for line in lines if f"  {trigger} " in line and f" {outcome} " in line + " "]

    assert len(rows("skip", "skipped")) == 2
    assert len(rows("skip", "completed")) == 2
    assert rows("buffer", "buffered")
    # the buffered boundary launched right when the previous run completed
    assert "Sat 03-07 09:15 EST  buffer     03-07 09:10 launched" in out
    assert len(rows("supersede", "superseded")) == 3
    # DST: 02:30 does not exist on 8 March, so that night fires at 03:30 EDT
    assert "Sun 03-08 03:30 EDT  dst        03-08 03:30 launched" in out
    assert "Sat 03-07 02:30 EST  dst" in out
    assert "Mon 03-09 02:30 EDT  dst" in out
    crash = lines.index(next(line for line in lines if "the process crashes" in line))
    restart = lines.index(next(line for line in lines if "the process restarts" in line))
    assert crash < restart
    after = "\n".join(lines[restart:])
    launched = re.search(r"report     03-10 12:00 launched    (run-\d+)", out)
    assert launched is not None
    run = launched.group(1)
    assert f"resumed     {run} by the new process from saved step 4/8" in after
    assert f"report     03-10 12:00 completed   {run}" in after
    # catch-up of both missed noons after the restart
    assert "nightly    03-11 12:00 launched" in after
    assert "nightly    03-12 12:00 completed" in after
    assert "failed" not in out.split("What happened:")[0]


def test_demo_json_lines(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["demo", "--json"]) == 0
    events = [json.loads(line) for line in capsys.readouterr().out.splitlines()]
    kinds = {e["event"] for e in events}
    assert {"start", "fire", "crash", "restart", "resume", "end"} <= kinds
    outcomes = {e["outcome"] for e in events if e["event"] == "fire"}
    assert outcomes == {"launched", "completed", "skipped", "buffered", "superseded"}
