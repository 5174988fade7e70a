"""``trio-triggers fire ID`` (run now, issue 16) as real processes.

``fire`` claims a manual fire and starts its run in the run store from its own process, which
does not serve; the serving ``trio-triggers run`` executes the run (its runner finds the pending
row) and its scheduler settles the ledger row when the recovery sweep adopts the held run.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from typing import TYPE_CHECKING, Any

import pytest

if TYPE_CHECKING:
    from pathlib import Path

pytestmark = pytest.mark.skipif(os.name != "posix", reason="POSIX signals and sh")

CONFIG = """
[runner]
poll_interval = 0.2

[scheduler]
poll_interval = 0.2
run_poll_interval = 0.1

[flows.record]
command = ["sh", "-c", "cat >> inputs.log; echo >> inputs.log"]

[[triggers]]
id = "nightly"
flow = "record"
cron = "0 3 * * *"
timezone = "UTC"
input = {from = "schedule"}

[[triggers]]
id = "weekly"
flow = "record"
cron = "0 3 * * 1"
timezone = "UTC"
"""

CLI = (sys.executable, "-m", "trio_triggers.cli")


def cli(tmp_path: Path, *args: str) -> subprocess.CompletedProcess[str]:
    config = str(tmp_path / "triggers.toml")
    return subprocess.run(
        [*CLI, *args, "--config", config],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=60,
    )


def as_json(done: subprocess.CompletedProcess[str]) -> Any:
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout)


@pytest.fixture
def registered(tmp_path: Path) -> Path:
    (tmp_path / "triggers.toml").write_text(CONFIG)
    done = cli(tmp_path, "run", "--for", "0.3s", "--quiet")  # registers the file's triggers
    assert done.returncode == 0, done.stderr
    return tmp_path


def test_fire_records_a_manual_fire_and_a_retried_key_runs_nothing(registered: Path) -> None:
    fired = as_json(
        cli(registered, "fire", "nightly", "--input", '{"n": 1}', "--key", "k1", "--json")
    )
    assert (fired["action"], fired["outcome"], fired["key"]) == ("fire", "launched", "k1")
    assert fired["occurrence"] % 1000 != 0  # off the grid of whole seconds
    assert fired["run_id"].startswith("run-")
    again = as_json(cli(registered, "fire", "nightly", "--key", "k1", "--json"))
    assert again["repeated"] is True
    assert (again["occurrence"], again["run_id"]) == (fired["occurrence"], fired["run_id"])
    text = cli(registered, "fire", "nightly", "--key", "k1")
    assert text.returncode == 0
    assert "key k1 already fired nightly" in text.stdout
    assert "nothing new runs" in text.stdout

    [row] = as_json(cli(registered, "history", "--json"))
    assert (row["trigger_id"], row["manual_key"], row["outcome"]) == ("nightly", "k1", "launched")
    table = cli(registered, "history")
    assert "launched (manual)" in table.stdout
    listed = as_json(cli(registered, "list", "--json"))
    [nightly] = [t for t in listed if t["trigger_id"] == "nightly"]
    assert nightly.get("last_fired_at") is None  # the cursor never moves for a manual fire
    shown = as_json(cli(registered, "show", fired["run_id"], "--json"))
    assert shown["input"] == {"n": 1}
    assert shown["manual_key"] == "k1"
    assert shown["status"] == "pending"  # nobody serves: the run waits in the run store


def test_fire_refusals_exit_1_or_2_and_write_nothing(registered: Path) -> None:
    assert cli(registered, "fire", "weekly", "--key", "theirs").returncode == 0
    conflict = cli(registered, "fire", "nightly", "--key", "theirs")
    assert conflict.returncode == 1
    assert "key_conflict" in conflict.stderr
    unknown = cli(registered, "fire", "missing")
    assert unknown.returncode == 1
    assert "unknown trigger missing" in unknown.stderr
    bad = cli(registered, "fire", "nightly", "--input", "{not json")
    assert bad.returncode == 2
    assert "--input: not JSON" in bad.stderr
    assert cli(registered, "pause", "nightly").returncode == 0
    paused = cli(registered, "fire", "nightly")
    assert paused.returncode == 1
    assert "trigger_paused" in paused.stderr
    rows = as_json(cli(registered, "history", "--json"))
    assert [r["trigger_id"] for r in rows] == ["weekly"]


def test_a_serving_process_executes_the_fire_and_settles_it(registered: Path) -> None:
    server = subprocess.Popen(
        [*CLI, "run", "--config", str(registered / "triggers.toml"), "--quiet"],
        cwd=registered,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        start_new_session=True,
    )
    try:
        time.sleep(0.5)
        fired = as_json(cli(registered, "fire", "nightly", "--key", "k2", "--json"))
        assert fired["outcome"] == "launched"
        log = registered / "inputs.log"
        deadline = time.monotonic() + 20
        while time.monotonic() < deadline:
            if log.exists() and '{"from":"schedule"}' in log.read_text():
                break
            time.sleep(0.1)
        # Without --input the run got the trigger's input; the serving runner executed it.
        assert log.read_text().splitlines() == ['{"from":"schedule"}']
        shown = as_json(cli(registered, "show", fired["run_id"], "--json"))
        assert (shown["status"], shown["manual_key"]) == ("completed", "k2")
    finally:
        server.send_signal(signal.SIGINT)
        _, stderr = server.communicate(timeout=20)
    assert server.returncode == 0, stderr
