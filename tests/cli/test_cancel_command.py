"""``trio-triggers cancel RUN_ID`` (issue 16): a running run, an ended run, an unknown id."""

from __future__ import annotations

import json
import threading
from typing import TYPE_CHECKING, Any

import pytest
import trio

import trio_triggers
from trio_triggers import RunContext
from trio_triggers.cli import main

if TYPE_CHECKING:
    from pathlib import Path

BOUND_S = 30.0
"""How long a real-time step may take before the test gives up (a bound, never expected)."""


class Served:
    """An application served in a background thread (real time) on ``database``: trigger
    ``h``'s first run holds until cancelled, its later runs end at once."""

    def __init__(self, database: Path) -> None:
        self.database = database
        self.held: str | None = None
        self.started = threading.Event()
        self.settled = threading.Event()
        self.stop = threading.Event()
        self.cancelled_in_flow = False
        self.thread = threading.Thread(target=lambda: trio.run(self._serve), daemon=True)

    async def _flow(self, input: Any, run: RunContext) -> None:
        if self.held is not None:
            return
        self.held = run.run_id
        self.started.set()
        try:
            await trio.sleep_forever()
        finally:
            self.cancelled_in_flow = run.cancel_requested

    async def _serve(self) -> None:
        async with trio_triggers.open_triggers(self.database) as app:
            app.flow("held")(self._flow)
            await app.schedule("h", "held", cron="* * * * * *")
            async with trio.open_nursery() as nursery:
                await nursery.start(app.serve)
                with trio.move_on_after(BOUND_S):
                    while not self.stop.is_set():
                        if self.held is not None:
                            page = await app.history(run_id=self.held)
                            if page.items and page.items[0].outcome == "failed":
                                self.settled.set()
                        await trio.sleep(0.05)
                nursery.cancel_scope.cancel()


def test_cancel_a_running_run_then_again_once_it_ended(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    served = Served(tmp_path / "app.sqlite")
    served.thread.start()
    try:
        assert served.started.wait(BOUND_S)
        run_id = served.held
        assert run_id is not None
        db = ["--db", str(served.database)]

        assert main(["cancel", run_id, *db]) == 0
        out = capsys.readouterr().out
        assert f"cancel requested for run {run_id} (running)" in out

        assert served.settled.wait(BOUND_S)  # the owner (another thread) saw the request
        assert main(["history", *db, "--trigger", "h", "--outcome", "failed", "--json"]) == 0
        rows = json.loads(capsys.readouterr().out)
        assert [r["error"] for r in rows if r["run_id"] == run_id] == [
            f"Run {run_id} was cancelled"
        ]

        assert main(["cancel", run_id, *db, "--json"]) == 0  # ended now: nothing changes
        report = json.loads(capsys.readouterr().out)
        assert report["cancel"] == "already_ended"
        assert report["status"] == "cancelled"
        assert report["cancel_requested_at"] is not None

        assert main(["cancel", run_id, *db]) == 0
        assert f"run {run_id} already ended: cancelled; nothing changed" in capsys.readouterr().out
    finally:
        served.stop.set()
        served.thread.join(BOUND_S)
    assert not served.thread.is_alive()
    assert served.cancelled_in_flow


def _completed_run(database: Path) -> str:
    """Serve a quick every-second flow until one run has completed; that run's id."""

    async def serve() -> str:
        async with trio_triggers.open_triggers(database) as app:

            @app.flow("quick")
            async def quick(input: Any, run: RunContext) -> str:
                return "done"

            await app.schedule("q", "quick", cron="* * * * * *")
            async with trio.open_nursery() as nursery:
                await nursery.start(app.serve)
                with trio.fail_after(BOUND_S):
                    while True:
                        page = await app.history(outcome="completed")
                        if page.items:
                            break
                        await trio.sleep(0.05)
                nursery.cancel_scope.cancel()
            run_id = page.items[0].run_id
            assert run_id is not None
            return run_id

    return trio.run(serve)


def test_cancel_an_ended_run_changes_nothing(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    database = tmp_path / "app.sqlite"
    run_id = _completed_run(database)
    db = ["--db", str(database)]
    assert main(["show", run_id, *db, "--json"]) == 0
    before = json.loads(capsys.readouterr().out)

    assert main(["cancel", run_id, *db]) == 0
    assert f"run {run_id} already ended: completed; nothing changed" in capsys.readouterr().out
    assert main(["cancel", run_id, *db, "--json"]) == 0
    report = json.loads(capsys.readouterr().out)
    assert report.pop("cancel") == "already_ended"
    assert report == before

    assert main(["show", run_id, *db, "--json"]) == 0
    assert json.loads(capsys.readouterr().out) == before  # no request was written


def test_cancel_a_pending_run_and_an_unknown_one(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    database = tmp_path / "app.sqlite"

    async def start() -> str:
        async with trio_triggers.open_triggers(database) as app:

            @app.flow
            async def f(input: Any, run: RunContext) -> None:
                return None

            return await app.runner.start(trio_triggers.StartRequest("f", None, "by-hand"))

    run_id = trio.run(start)  # nobody serves it
    db = ["--db", str(database)]
    assert main(["--db", str(database), "cancel", run_id, "--json"]) == 0  # global option first
    report = json.loads(capsys.readouterr().out)
    assert report["cancel"] == "requested"
    assert report["status"] == "pending"
    assert report["cancel_requested_at"] is not None
    assert main(["cancel", run_id, *db]) == 0
    assert "no worker is running it" in capsys.readouterr().out

    assert main(["cancel", "run-nobody", *db]) == 1
    captured = capsys.readouterr()
    assert "unknown run run-nobody" in captured.err
    assert captured.out == ""


def test_cancel_has_help_with_an_example(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exited:
        main(["cancel", "--help"])
    assert exited.value.code == 0
    text = capsys.readouterr().out
    assert "heartbeat interval" in text
    assert "example:\n  trio-triggers cancel" in text
    assert "--db" in text
    assert "--config" in text
