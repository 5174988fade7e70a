"""``pause``, ``resume``, ``remove`` and what ``list`` says of them (issues 16 and 18)."""

from __future__ import annotations

import json
from typing import TYPE_CHECKING

import pytest
import trio

import trio_triggers
from trio_triggers.cli import main

if TYPE_CHECKING:
    from pathlib import Path

CONFIG = """
[flows.echo]
command = ["true"]

[[triggers]]
id = "nightly"
flow = "echo"
cron = "0 3 * * *"
timezone = "UTC"
"""


@pytest.fixture
def db(tmp_path: Path) -> list[str]:
    database = tmp_path / "t.sqlite"
    assert (
        main(["add", "--db", str(database), "--id", "n", "--flow", "f", "--cron", "0 3 * * *"]) == 0
    )
    return ["--db", str(database)]


def test_pause_is_shown_by_list_with_its_note_and_survives_a_config_apply(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    config = tmp_path / "triggers.toml"
    config.write_text(CONFIG)
    cfg = ["--config", str(config)]
    # `run` registers the file's trigger; a short run is enough.
    assert main(["run", *cfg, "--for", "0.2s", "--quiet"]) == 0
    capsys.readouterr()
    assert main(["pause", "nightly", *cfg, "--note", "warehouse migration", "--by", "ops"]) == 0
    out = capsys.readouterr().out
    assert "nightly is paused since " in out
    assert "by ops: warehouse migration" in out
    assert "trio-triggers resume nightly --from now|policy" in out

    assert main(["run", *cfg, "--for", "0.2s", "--quiet"]) == 0  # re-applies the file
    capsys.readouterr()
    assert main(["list", *cfg, "--utc"]) == 0
    listed = capsys.readouterr().out
    assert "paused  " in listed.splitlines()[2]  # the row's STATE column
    assert "paused nightly since " in listed
    assert "by ops: warehouse migration" in listed
    assert main(["list", *cfg, "--json"]) == 0
    (row,) = json.loads(capsys.readouterr().out)
    assert row["paused"]["note"] == "warehouse migration"
    assert row["paused"]["by"] == "ops"
    assert row["enabled"] is True


def test_resume_states_its_point(db: list[str], capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["pause", "n", *db]) == 0
    capsys.readouterr()
    with pytest.raises(SystemExit) as exited:
        main(["resume", "n", *db])  # the point is not optional
    assert exited.value.code == 2
    assert "--from" in capsys.readouterr().err
    assert main(["resume", "n", *db, "--from", "now"]) == 0
    assert capsys.readouterr().out.startswith("n resumed from now: 0 boundaries")
    assert main(["resume", "n", *db, "--from", "now"]) == 0
    assert capsys.readouterr().out == "n was not paused: nothing changed\n"
    assert main(["pause", "n", *db]) == 0
    capsys.readouterr()
    assert main(["resume", "n", *db, "--from", "policy", "--json"]) == 0
    resumed = json.loads(capsys.readouterr().out)
    assert resumed["was_paused"] is True
    assert resumed["point"] == "policy"
    assert resumed["skipped"] == 0


def test_unknown_ids_exit_1(db: list[str], capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["pause", "nope", *db]) == 1
    assert "unknown trigger nope" in capsys.readouterr().err
    assert main(["resume", "nope", *db, "--from", "now"]) == 1
    assert "unknown trigger nope" in capsys.readouterr().err


def test_list_tells_removed_from_disabled(
    db: list[str], capsys: pytest.CaptureFixture[str]
) -> None:
    database = db[1]
    assert main(["add", *db, "--id", "m", "--flow", "f", "--cron", "0 4 * * *"]) == 0
    assert main(["disable", "m", *db]) == 0
    assert main(["remove", "n", *db]) == 0
    capsys.readouterr()
    assert main(["list", *db]) == 0
    rows = {line.split()[0]: line for line in capsys.readouterr().out.splitlines()[2:]}
    assert " disabled " in rows["m"]
    assert " removed " in rows["n"]
    assert main(["enable", "n", *db]) == 0  # enabling brings it back: no longer removed
    capsys.readouterr()
    assert main(["list", *db, "--json"]) == 0
    listed = {row["trigger_id"]: row for row in json.loads(capsys.readouterr().out)}
    assert "removed_at" not in listed["n"]
    assert listed["n"]["enabled"] is True

    async def removed_at() -> int | None:
        async with trio_triggers.open_triggers(database) as app:
            found = await app.store.get("n")
            return None if found is None else found.removed_at

    assert trio.run(removed_at) is None
