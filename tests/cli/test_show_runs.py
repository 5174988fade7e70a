"""``show RUN_ID`` and the run's own error in ``history`` (issue 15: every outcome in sight)."""

from __future__ import annotations

import json
from typing import TYPE_CHECKING, Any

import trio

import trio_triggers
from trio_triggers import RunContext
from trio_triggers.cli import main

if TYPE_CHECKING:
    from pathlib import Path

    import pytest


def _fail_once(database: Path) -> None:
    """Serve a failing every-second flow (real time, about two seconds) into ``database``."""

    async def serve() -> None:
        async with trio_triggers.open_triggers(database) as app:

            @app.flow("broken")
            async def broken(input: Any, run: RunContext) -> None:
                raise ValueError("the disk is full")

            await app.schedule("b", "broken", cron="* * * * * *")
            async with trio.open_nursery() as nursery:
                await nursery.start(app.serve)
                await trio.sleep(2.5)
                nursery.cancel_scope.cancel()

    trio.run(serve)


def test_history_and_show_give_the_flows_own_error(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    database = tmp_path / "app.sqlite"
    _fail_once(database)
    db = ["--db", str(database)]
    assert main(["history", *db, "--outcome", "failed", "--json"]) == 0
    rows = json.loads(capsys.readouterr().out)
    assert rows
    failed = rows[0]
    assert failed["error"].startswith("Run ")  # the ledger's own message, as the contract says
    assert "the disk is full" in failed["run_error"]

    assert main(["history", *db, "--outcome", "failed"]) == 0
    assert "the disk is full" in capsys.readouterr().out

    assert main(["show", failed["run_id"], *db, "--json"]) == 0
    shown = json.loads(capsys.readouterr().out)
    assert shown["status"] == "failed"
    assert shown["attempts"] == 1
    assert shown["trigger_id"] == "b"
    assert shown["occurrence"] == failed["occurrence"]
    assert "the disk is full" in shown["error"]

    assert main(["show", failed["run_id"], *db]) == 0
    text = capsys.readouterr().out
    assert "status      failed" in text
    assert "attempts    1" in text
    assert "the disk is full" in text

    assert main(["show", "run-nobody", *db]) == 1
    assert "unknown run run-nobody" in capsys.readouterr().err
