"""The operator verbs as an operator meets them (issue 16): each one a separate
``trio-triggers`` process acting on a database that another process, ``trio-triggers run``, is
serving. Nothing is shared but the SQLite file, so what is checked here is what the store makes
durable and what the serving process reads back from it:

* ``cancel RUN_ID`` stops a command flow held by the serving process, and its boundary settles
  ``failed`` with the cancellation as its error;
* ``pause ID --note`` stops new work at once: no boundary after the moment ``pause`` returned is
  ever claimed (the pause bumps the revision, so a claim the server decided before it is fenced);
  ``list --json`` shows the note;
* ``resume ID --from now`` starts the trigger again from the resume on.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from pathlib import Path

BOUND_S = 60.0
"""How long a real-time step may take before the test gives up (a bound, never expected)."""

QUIET_S = 2.5
"""How long the paused trigger is watched for a fire that must not come (more than two of its
boundaries, and more than one serve-loop wake-up)."""

HOLD = "import os, time\nwhile not os.path.exists('release'): time.sleep(0.05)"
"""The flow: it runs until the test creates ``release`` in the serving process's directory."""


def _cli() -> tuple[list[str], dict[str, str]]:
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)}
    return [sys.executable, "-m", "trio_triggers.cli"], env


def _verb(tmp_path: Path, *args: str) -> subprocess.CompletedProcess[str]:
    """One ``trio-triggers`` command in its own process, on the served database."""
    cli, env = _cli()
    done = subprocess.run(
        [*cli, *args, "--db", str(tmp_path / "t.sqlite")],
        capture_output=True,
        text=True,
        env=env,
        timeout=BOUND_S,
        check=False,
    )
    assert done.returncode == 0, (args, done.stdout, done.stderr)
    assert "Traceback" not in done.stderr
    return done


def _history(tmp_path: Path) -> list[dict[str, Any]]:
    if not (tmp_path / "t.sqlite").exists():
        return []  # the serving process has not created its database yet
    rows: list[dict[str, Any]] = json.loads(_verb(tmp_path, "history", "--json").stdout)
    return rows


def _wait_for(tmp_path: Path, found: Any) -> list[dict[str, Any]]:
    """Poll the ledger (in a separate process each time) until ``found(rows)`` holds."""
    deadline = time.monotonic() + BOUND_S
    while True:
        rows = _history(tmp_path)
        if found(rows):
            return rows
        assert time.monotonic() < deadline, rows
        time.sleep(0.2)


def test_cancel_pause_and_resume_from_other_processes(tmp_path: Path) -> None:
    config = tmp_path / "triggers.toml"
    config.write_text(
        f"""
database = "t.sqlite"

[flows.hold]
command = [{json.dumps(sys.executable)}, "-c", {json.dumps(HOLD)}]

[[triggers]]
id = "every-second"
flow = "hold"
cron = "* * * * * *"
"""
    )
    cli, env = _cli()
    serving = subprocess.Popen(
        [*cli, "run", "--config", str(config), "--for", f"{4 * BOUND_S}s", "--quiet"],
        cwd=tmp_path,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
        env=env,
    )
    try:
        # cancel: the held run of the first launched boundary
        rows = _wait_for(tmp_path, lambda rs: any(r["outcome"] == "launched" for r in rs))
        run_id = next(r["run_id"] for r in rows if r["outcome"] == "launched")
        cancel = json.loads(_verb(tmp_path, "cancel", run_id, "--json").stdout)
        assert cancel["run_id"] == run_id
        assert cancel["cancel"] != "already_ended"
        rows = _wait_for(
            tmp_path, lambda rs: any(r["run_id"] == run_id and r["outcome"] == "failed" for r in rs)
        )
        (settled,) = [r for r in rows if r["run_id"] == run_id]
        assert settled["error"] == f"Run {run_id} was cancelled"
        shown = json.loads(_verb(tmp_path, "show", run_id, "--json").stdout)
        assert shown["status"] == "cancelled"

        # pause: nothing after the moment it returned is ever claimed
        _verb(tmp_path, "pause", "every-second", "--note", "disk swap", "--by", "ops")
        paused_at_ms = int(time.time() * 1000)
        (listed,) = json.loads(_verb(tmp_path, "list", "--json").stdout)
        assert listed["paused"]["note"] == "disk swap"
        assert listed["paused"]["by"] == "ops"
        time.sleep(QUIET_S)  # the serving process keeps ticking all the while
        late = [r for r in _history(tmp_path) if r["occurrence"] > paused_at_ms]
        assert late == []

        # resume from now: boundaries after the resume fire again
        resumed_at_ms = int(time.time() * 1000)
        out = _verb(tmp_path, "resume", "every-second", "--from", "now").stdout
        assert out.startswith("every-second resumed from now:")
        _wait_for(tmp_path, lambda rs: any(r["occurrence"] > resumed_at_ms for r in rs))
        (listed,) = json.loads(_verb(tmp_path, "list", "--json").stdout)
        assert "paused" not in listed  # the JSON leaves out what is not set
    finally:
        (tmp_path / "release").touch()
        serving.send_signal(signal.SIGINT)
        try:
            _, err = serving.communicate(timeout=BOUND_S)
        finally:
            serving.kill()
    assert serving.returncode == 0, err
    assert "Traceback" not in err
