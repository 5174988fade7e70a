"""``[flows.NAME.retry]`` and ``timeout`` in a config file: validated where written, and
served by ``trio-triggers run`` (docs/failures.md)."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from typing import TYPE_CHECKING

import pytest

from trio_triggers import RetryPolicy
from trio_triggers.cli import main
from trio_triggers.cli._config import load_config

if TYPE_CHECKING:
    from pathlib import Path

TRIGGER = """
[[triggers]]
id = "t"
flow = "flaky"
cron = "* * * * * *"
timezone = "UTC"
"""

#: Fails (exit 1) on its first two executions, then succeeds; counts them in ``count``.
SCRIPT = "n=$(cat count 2>/dev/null || echo 0); n=$((n+1)); echo $n > count; echo try $n >&2"
FLAKY = f"""
[flows.flaky]
command = ["sh", "-c", "{SCRIPT}; [ $n -ge 3 ]"]
"""


def test_retry_table_becomes_the_flows_policy(tmp_path: Path) -> None:
    config = tmp_path / "triggers.toml"
    config.write_text(
        FLAKY
        + "timeout = 30\n"
        + "[flows.flaky.retry]\nmax_attempts = 5\ninitial_delay = 2\nmax_delay = 10\n"
        + "multiplier = 3\nretry_on = [1, 'timeout']\n"
        + "[flows.py]\npython = 'json:dumps'\ntimeout = 4.5\n"
        + TRIGGER
    )
    loaded = load_config(config, import_flows=False)
    assert loaded.retry_policies == {
        "flaky": RetryPolicy(
            max_attempts=5, initial_delay=2, max_delay=10, multiplier=3, retry_on=(1, "timeout")
        )
    }
    assert loaded.config.flows["py"].timeout == 4.5


BAD = {
    "zero_attempts": ("max_attempts = 0", "flows.flaky.retry.max_attempts", "invalid_value"),
    "negative_delay": ("initial_delay = -1", "flows.flaky.retry.initial_delay", "invalid_value"),
    "cap_below_start": (
        "initial_delay = 10\nmax_delay = 1",
        "flows.flaky.retry.max_delay",
        "invalid_value",
    ),
    "shrinking": ("multiplier = 0.5", "flows.flaky.retry.multiplier", "invalid_value"),
    "empty_name": ("retry_on = [1, '']", "flows.flaky.retry.retry_on[1]", "invalid_value"),
    "wrong_type": ("retry_on = [1.5]", "flows.flaky.retry.retry_on[0]", "invalid_value"),
    "unknown": ("backoff = 'fast'", "flows.flaky.retry.backoff", "unknown_key"),
    "attempts_text": ("max_attempts = 'three'", "flows.flaky.retry.max_attempts", "invalid_value"),
}


@pytest.mark.parametrize("case", sorted(BAD))
def test_bad_retry_keys_are_refused_with_their_path_and_write_nothing(
    case: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    line, field, code = BAD[case]
    config = tmp_path / "triggers.toml"
    config.write_text(FLAKY + "[flows.flaky.retry]\n" + line + "\n" + TRIGGER)
    db = tmp_path / "state.sqlite"
    assert main(["run", "--config", str(config), "--db", str(db)]) == 2
    err = capsys.readouterr().err
    assert re.search(rf"(:\d+)?: {re.escape(field)}: {code}: ", err), err
    assert not db.exists()


def test_bad_timeout_is_refused_for_python_flows_too(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    config = tmp_path / "triggers.toml"
    config.write_text("[flows.flaky]\npython = 'json:dumps'\ntimeout = 0\n" + TRIGGER)
    db = tmp_path / "state.sqlite"
    assert main(["run", "--config", str(config), "--db", str(db)]) == 2
    assert "flows.flaky.timeout: invalid_value" in capsys.readouterr().err
    assert not db.exists()


@pytest.mark.skipif(os.name != "posix", reason="sh commands")
def test_a_flow_failing_twice_then_succeeding_is_one_run_of_three_attempts(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    config = tmp_path / "triggers.toml"
    config.write_text(
        FLAKY
        + "[flows.flaky.retry]\nmax_attempts = 3\ninitial_delay = 0.2\nmax_delay = 0.2\n"
        + "retry_on = [1]\n"
        + "[scheduler]\npoll_interval = 0.1\nrun_poll_interval = 0.1\n"
        + "[runner]\npoll_interval = 0.1\n"
        + TRIGGER
    )
    db = tmp_path / "state.sqlite"
    argv = ["run", "--config", str(config), "--db", str(db), "--for", "3s", "--json"]
    done = subprocess.run(
        [sys.executable, "-m", "trio_triggers.cli", *argv],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 0, done.stderr
    assert main(["history", "--db", str(db), "--json"]) == 0
    fires = json.loads(capsys.readouterr().out)
    first = min((f for f in fires if f["run_id"]), key=lambda f: f["occurrence"])
    assert first["outcome"] == "completed", fires
    assert main(["show", first["run_id"], "--db", str(db), "--json"]) == 0
    shown = json.loads(capsys.readouterr().out)
    assert shown["status"] == "completed"
    assert shown["attempts"] == 3
    assert shown["attempt"] == 3
    assert [a["attempt"] for a in shown["attempt_log"]] == [1, 2]
    assert all("exited with status 1" in a["error"] for a in shown["attempt_log"])
    assert shown["attempt_log"][0]["output"]["stderr"].strip() == "try 1"
    # Nothing failed: the trigger's later boundaries were skipped while the run retried, or ran.
    assert not any(f["outcome"] == "failed" for f in fires)

    assert main(["show", first["run_id"], "--db", str(db)]) == 0
    text = capsys.readouterr().out
    assert re.search(r"^attempt +3 \(2 retried\)$", text, re.MULTILINE), text
    assert "-- attempt 1: " in text
    assert "stderr: try 2" in text
