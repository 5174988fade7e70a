"""``trio-triggers backfill ID --from T --to T`` through real subprocesses (issue 16).

A yearly trigger (its own schedule fires nothing while the test runs) is backfilled over six past
New Year boundaries: ``list`` shows the backfill in progress, refusals say which flag and exit
non-zero with nothing written, ``run`` carries it out (one command run per boundary, with its
scheduled idempotency key), a second backfill of the same interval runs nothing again, and
``--cancel`` stops one.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from typing import TYPE_CHECKING, Any

import pytest

from trio_triggers import idempotency_key

if TYPE_CHECKING:
    from pathlib import Path

pytestmark = pytest.mark.skipif(os.name != "posix", reason="POSIX true(1)")

CONFIG = """
[flows.echo]
command = ["true"]

[[triggers]]
id = "yearly"
flow = "echo"
cron = "0 0 1 1 *"
timezone = "UTC"
"""

NEW_YEARS = [
    1577836800000,  # 2020-01-01T00:00Z
    1609459200000,
    1640995200000,
    1672531200000,
    1704067200000,
    1735689600000,  # 2025-01-01T00:00Z
]


def cli(*args: str, cwd: Path, timeout: float = 60) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "trio_triggers.cli", *args, "--config", "triggers.toml"],
        cwd=cwd,
        env={**os.environ, "TZ": "UTC"},
        capture_output=True,
        text=True,
        timeout=timeout,
        check=False,
    )


def listed(cwd: Path) -> dict[str, Any]:
    done = cli("list", "--json", cwd=cwd)
    assert done.returncode == 0, done.stderr
    (row,) = json.loads(done.stdout)
    return row  # type: ignore[no-any-return]


def test_backfill_is_listed_refused_typed_carried_out_once_and_cancelled(tmp_path: Path) -> None:
    (tmp_path / "triggers.toml").write_text(CONFIG)
    assert cli("run", "--for", "0.3s", "--quiet", cwd=tmp_path).returncode == 0  # registers it

    started = cli(
        "backfill",
        "yearly",
        "--from",
        "2020-01-01",
        "--to",
        "2025-01-01T00:00Z",
        "--overlap",
        "buffer-one",
        "--by",
        "ops",
        cwd=tmp_path,
    )
    assert started.returncode == 0, started.stderr
    assert started.stdout.splitlines()[0] == (
        "backfill of yearly started: 6 boundaries from 2020-01-01 00:00:00Z to "
        "2025-01-01 00:00:00Z (overlap buffer-one)"
    )
    shown = cli("list", "--utc", cwd=tmp_path)
    assert (
        "backfill yearly 0/6 boundaries done, next 2020-01-01 00:00:00Z (from 2020-01-01 "
        "00:00:00Z to 2025-01-01 00:00:00Z), overlap buffer-one, by ops"
    ) in shown.stdout
    backfill = listed(tmp_path)["backfill"]
    assert (backfill["state"], backfill["total"], backfill["next"]) == ("running", 6, NEW_YEARS[0])

    # Refusals: typed, with the flag, a non-zero status, and nothing written.
    before = listed(tmp_path)
    for args, status, text in [
        (["--from", "2025-01-01", "--to", "2020-01-01"], 2, "(--to)"),
        (["--from", "2020-01-01", "--to", "+1d"], 2, "in the future"),
        (["--from", "2020-01-01", "--to", "2025-01-01"], 1, "already has a running backfill"),
        (["--from", "yesterday-ish", "--to", "now"], 2, "not an instant"),
    ]:
        refused = cli("backfill", "yearly", *args, cwd=tmp_path)
        assert refused.returncode == status, (args, refused.stderr)
        assert text in refused.stderr, refused.stderr
    unknown = cli("backfill", "nope", "--from", "2020-01-01", "--to", "2021-01-01", cwd=tmp_path)
    assert (unknown.returncode, unknown.stderr) == (
        1,
        "trio-triggers: error: unknown trigger nope\n",
    )
    assert listed(tmp_path) == before

    served = cli("run", "--for", "5s", "--quiet", cwd=tmp_path)  # the scheduler carries it out
    assert served.returncode == 0, served.stderr
    backfill = listed(tmp_path)["backfill"]
    assert (backfill["state"], backfill["done"], backfill["next"]) == ("done", 6, None)
    assert "backfill yearly" not in cli("list", cwd=tmp_path).stdout  # only a running one
    runs = json.loads(cli("runs", "--trigger", "yearly", "--json", cwd=tmp_path).stdout)
    expected = sorted(idempotency_key("yearly", at) for at in NEW_YEARS)
    assert sorted(run["idempotency_key"] for run in runs) == expected
    assert all(run["status"] == "completed" for run in runs)

    # The same interval again: every boundary is in the ledger, so nothing runs twice.
    again = cli("backfill", "yearly", "--from", "2020-01-01", "--to", "2025-01-01", cwd=tmp_path)
    assert again.returncode == 0, again.stderr
    # Under the trigger's skip, the command says what that means for a backfill (and only then).
    hint = "--overlap buffer-one runs them one after another"
    assert hint in again.stdout
    assert hint not in started.stdout
    assert cli("run", "--for", "2s", "--quiet", cwd=tmp_path).returncode == 0
    assert listed(tmp_path)["backfill"]["state"] == "done"
    runs = json.loads(cli("runs", "--trigger", "yearly", "--json", cwd=tmp_path).stdout)
    assert len(runs) == 6

    # --cancel stops a running one (and says so when none runs).
    cli("backfill", "yearly", "--from", "2019-01-01", "--to", "2019-01-01", cwd=tmp_path)
    cancelled = cli("backfill", "yearly", "--cancel", cwd=tmp_path)
    assert cancelled.stdout == (
        "backfill of yearly cancelled after 0 of 1 boundaries (what it fired stays fired)\n"
    )
    assert listed(tmp_path)["backfill"]["state"] == "cancelled"
    nothing = cli("backfill", "yearly", "--cancel", cwd=tmp_path)
    assert nothing.stdout == "yearly has no running backfill: nothing changed\n"
