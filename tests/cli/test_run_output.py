"""``run``'s own output stays its own (issue 18 section 1), through real subprocesses.

A Python flow that prints and a command flow that inherits fd 1 both write to stderr while
``run`` serves, so ``run --json`` stays one JSON document per line; and when the reader of that
stream goes away (``run --json | head -2``) the CLI stops quietly, as Ctrl-C would, with the
status a closed pipe gives (141), no traceback, and no flow failed by it.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from typing import TYPE_CHECKING

import pytest

if TYPE_CHECKING:
    from pathlib import Path

pytestmark = pytest.mark.skipif(os.name != "posix", reason="POSIX pipes and sh")

NOISY_FLOWS = """
async def noisy(input, run):
    for i in range(50):
        print("flow says hello", i)
    return {"ok": True}
"""


def write_config(tmp_path: Path) -> Path:
    (tmp_path / "noisy_flows.py").write_text(NOISY_FLOWS)
    config = tmp_path / "triggers.toml"
    config.write_text(
        "[flows.noisy]\n"
        'python = "noisy_flows:noisy"\n'
        "[flows.shout]\n"
        'command = ["sh", "-c", "echo shouted on fd 2 >&2"]\n'
        "[scheduler]\npoll_interval = 0.1\nrun_poll_interval = 0.1\n"
        "[[triggers]]\n"
        'id = "noisy"\nflow = "noisy"\ncron = "* * * * * *"\ntimezone = "UTC"\n'
        "[[triggers]]\n"
        'id = "shout"\nflow = "shout"\ncron = "* * * * * *"\ntimezone = "UTC"\n'
    )
    return config


def command(config: Path, seconds: str) -> list[str]:
    return [
        sys.executable,
        "-m",
        "trio_triggers.cli",
        "run",
        "--config",
        str(config),
        "--for",
        seconds,
        "--json",
    ]


def test_flow_prints_go_to_stderr_and_the_event_stream_stays_json(tmp_path: Path) -> None:
    config = write_config(tmp_path)
    done = subprocess.run(
        command(config, "2.5s"), cwd=tmp_path, capture_output=True, text=True, timeout=60
    )
    assert done.returncode == 0, done.stderr
    events = [json.loads(line) for line in done.stdout.splitlines()]  # every line is JSON
    assert {e["trigger_id"] for e in events if e["outcome"] == "completed"} >= {"noisy"}
    assert "flow says hello 49" in done.stderr  # the flow's print, kept, on stderr
    assert "flow says hello" not in done.stdout
    assert not any(e["outcome"] == "failed" for e in events)


def test_a_closed_pipe_stops_run_quietly(tmp_path: Path) -> None:
    config = write_config(tmp_path)
    with subprocess.Popen(
        command(config, "30s"),
        cwd=tmp_path,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    ) as proc:
        assert proc.stdout is not None
        first = [proc.stdout.readline(), proc.stdout.readline()]  # what `| head -2` reads
        proc.stdout.close()  # ... and then the reader goes away
        try:
            # Well before --for's 30 s: the closed pipe stopped it.
            _, stderr = proc.communicate(timeout=20)
        finally:
            proc.kill()
        status = proc.returncode
    assert all(json.loads(line)["event"] == "fire" for line in first)
    assert status == 141, stderr
    assert "Traceback" not in stderr
    assert "BrokenPipeError" not in stderr
    assert stderr.splitlines()[-1] == "-- stdout was closed: stopped"
    ledger = subprocess.run(
        [sys.executable, "-m", "trio_triggers.cli", "history", "--config", str(config), "--json"],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
    )
    outcomes = [r["outcome"] for r in json.loads(ledger.stdout)]
    assert "completed" in outcomes
    assert "failed" not in outcomes  # no flow met the closed pipe
