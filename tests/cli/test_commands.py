"""The store commands in-process: add, list, next, history, enable/disable/remove, prune."""

from __future__ import annotations

import json
from typing import TYPE_CHECKING

import trio

from trio_triggers import SystemWallClock
from trio_triggers._databases import open_stores
from trio_triggers._store import Result
from trio_triggers.cli import main

if TYPE_CHECKING:
    from pathlib import Path

    import pytest

CONFIG = """
[flows.echo]
command = ["cat"]

[[triggers]]
id = "declared"
flow = "echo"
cron = "0 3 * * *"
timezone = "Europe/Berlin"
"""


def run_json(capsys: pytest.CaptureFixture[str], *args: str) -> object:
    assert main([*args, "--json"]) == 0
    return json.loads(capsys.readouterr().out)


def test_add_list_next_enable_disable_remove(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    config = tmp_path / "triggers.toml"
    config.write_text(CONFIG)
    db = ["--config", str(config)]
    added = run_json(
        capsys,
        "add",
        *db,
        "--id",
        "hourly",
        "--flow",
        "echo",
        "--cron",
        "0 * * * *",
        "--tz",
        "UTC",
        "--input",
        '{"a": 1}',
        "--overlap",
        "buffer-one",
    )
    assert isinstance(added, dict)
    assert (added["id"], added["revision"], added["input"]) == ("hourly", 1, {"a": 1})
    assert (tmp_path / "trio-triggers.sqlite").exists()  # next to the config by default

    listed = run_json(capsys, "list", *db)
    assert isinstance(listed, list)
    (row,) = listed
    assert row["trigger_id"] == "hourly"
    assert row["overlap"] == "buffer-one"
    assert len(row["next_occurrences"]) == 5

    assert main(["list", *db]) == 0
    table = capsys.readouterr().out
    assert table.splitlines()[0].split() == ["ID", "FLOW", "CRON", "TIMEZONE", "STATE", "NEXT"]
    assert main(["list", *db, "--wide"]) == 0
    table = capsys.readouterr().out
    assert "buffer-one/none" in table

    upcoming = run_json(capsys, "next", "hourly", *db, "-n", "3")
    assert isinstance(upcoming, list)
    instants = [item["occurrence"] for item in upcoming]
    assert len(instants) == 3
    assert instants[1] - instants[0] == instants[2] - instants[1] == 3_600_000

    assert main(["disable", "hourly", *db]) == 0
    assert "hourly is disabled (revision 2)" in capsys.readouterr().out
    assert main(["enable", "hourly", *db]) == 0
    assert "hourly is enabled (revision 3)" in capsys.readouterr().out
    assert main(["remove", "hourly", *db]) == 0
    assert "removed hourly" in capsys.readouterr().out
    listed = run_json(capsys, "list", *db)
    assert isinstance(listed, list)
    assert [r["enabled"] for r in listed] == [False]

    assert main(["enable", "nope", *db]) == 1
    assert "unknown trigger nope" in capsys.readouterr().err


def test_add_refuses_a_flow_the_config_does_not_declare(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    config = tmp_path / "triggers.toml"
    config.write_text(CONFIG)
    status = main(
        ["add", "--config", str(config), "--id", "x", "--flow", "nope", "--cron", "* * * * *"]
    )
    assert status == 2
    assert "declares no flow 'nope'" in capsys.readouterr().err
    assert not (tmp_path / "trio-triggers.sqlite").exists()


def test_history_filters_and_prune(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    db = str(tmp_path / "t.sqlite")
    assert main(["add", "--db", db, "--id", "h", "--flow", "f", "--cron", "0 * * * *"]) == 0
    capsys.readouterr()

    async def seed() -> None:
        async with open_stores(db, clock=SystemWallClock()) as (store, _runs):
            for occurrence in (3_600_000, 7_200_000):
                claim = await store.claim_fire("h", occurrence, expected_revision=1)
                assert claim.claimed
                await store.record_result(
                    Result(trigger_id="h", occurrence=occurrence, outcome="skipped")
                )

    trio.run(seed)
    rows = run_json(capsys, "history", "--db", db)
    assert isinstance(rows, list)
    assert [r["occurrence_iso"] for r in rows] == [
        "1970-01-01T02:00:00.000Z",
        "1970-01-01T01:00:00.000Z",
    ]
    assert run_json(capsys, "history", "--db", db, "--trigger", "other") == []
    assert main(["history", "--db", db, "--limit", "1", "--utc"]) == 0
    text = capsys.readouterr().out
    assert "1970-01-01 02:00:00Z" in text
    assert "01:00:00Z" not in text
    assert main(["history", "--db", db, "--limit", "0"]) == 2
    capsys.readouterr()

    pruned = run_json(capsys, "prune", "--db", db, "--older-than", "30d")
    assert isinstance(pruned, dict)
    assert pruned["deleted"] == 2
    assert run_json(capsys, "history", "--db", db) == []
    assert main(["prune", "--db", db, "--older-than", "soon"]) == 2
