"""A command flow's output is kept with its run (issue 18: 64 KiB tails, shown by ``show``).

Real processes, so real time with short bounds. Each stream keeps its last ``OUTPUT_TAIL_BYTES``
and its whole size, whatever ended the command: its exit, a failure or a cancel.
"""

from __future__ import annotations

import json
import os
import signal
import sys
from typing import TYPE_CHECKING, Any

import pytest
import trio

import trio_triggers
from tests.cli.flow_support import context
from trio_triggers import OUTPUT_TAIL_BYTES, RunOutput
from trio_triggers.cli import main
from trio_triggers.cli._flows import CommandFailed, CommandFlow

if TYPE_CHECKING:
    from pathlib import Path

pytestmark = pytest.mark.skipif(os.name != "posix", reason="command flows need POSIX processes")

#: Writes 100 000 bytes of numbered lines to stdout and a short line to stderr.
CHATTY = (
    "import sys\n"
    "for i in range(10_000): sys.stdout.write(f'line {i:04}\\n')\n"
    "sys.stderr.write('a warning\\n')\n"
)


async def test_a_long_stdout_keeps_its_tail_and_its_size() -> None:
    run = context()
    with trio.fail_after(20):
        result = await CommandFlow([sys.executable, "-c", CHATTY])(None, run)
    output = run.output
    assert output is not None
    assert output.stdout_bytes == 100_000
    assert len(output.stdout.encode()) == OUTPUT_TAIL_BYTES
    assert output.stdout.endswith("line 9999\n")
    assert "line 0000" not in output.stdout  # the head was dropped, the tail kept
    assert output.stderr == "a warning\n"
    assert output.stderr_bytes == len("a warning\n")
    assert output.truncated
    # A result printed on a stdout longer than the tail is its text, not parsed.
    assert isinstance(result, str)
    assert result.endswith("line 9999")


async def test_a_short_json_stdout_is_the_result_and_the_output() -> None:
    run = context()
    with trio.fail_after(20):
        result = await CommandFlow(["sh", "-c", "echo '{\"rows\": 3}'; echo note >&2"])(None, run)
    assert result == {"rows": 3}
    assert run.output == RunOutput(
        stdout='{"rows": 3}\n', stderr="note\n", stdout_bytes=12, stderr_bytes=5
    )
    assert not run.output.truncated


async def test_a_failed_command_keeps_both_streams() -> None:
    run = context()
    with trio.fail_after(20), pytest.raises(CommandFailed, match="status 3: the disk is full"):
        await CommandFlow(["sh", "-c", "echo half done; echo the disk is full >&2; exit 3"])(
            None, run
        )
    assert run.output is not None
    assert run.output.stdout == "half done\n"
    assert run.output.stderr == "the disk is full\n"


async def test_a_cancelled_command_keeps_what_it_printed_before() -> None:
    run = context()
    flow = CommandFlow(["sh", "-c", "echo started; sleep 37"], kill_grace=1)
    with trio.fail_after(20):
        async with trio.open_nursery() as nursery:
            nursery.start_soon(flow, None, run)
            await trio.sleep(0.5)
            nursery.cancel_scope.cancel()
    assert run.output is not None
    assert run.output.stdout == "started\n"


async def test_a_process_left_holding_the_pipes_does_not_hold_the_run(tmp_path: Path) -> None:
    pidfile = tmp_path / "pid"
    run = context()
    # The background sleep inherits stdout and keeps it open after sh has exited.
    flow = CommandFlow(["sh", "-c", f"echo $$ > {pidfile}; echo done; sleep 30 &"])
    began = trio.current_time()
    try:
        with trio.fail_after(20):
            result = await flow(None, run)
    finally:
        os.killpg(int(pidfile.read_text()), signal.SIGKILL)  # the sleep, left behind
    assert trio.current_time() - began < 10  # the drain grace (1 s), not the sleep (30 s)
    assert result == "done"
    assert run.output is not None
    assert run.output.stdout == "done\n"


def test_show_prints_the_output_recorded_with_the_run(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    database = tmp_path / "app.sqlite"

    async def serve() -> None:
        async with trio_triggers.open_triggers(database) as app:
            app.flow("chatty")(CommandFlow([sys.executable, "-c", CHATTY]))
            await app.schedule("c", "chatty", cron="* * * * * *")
            async with trio.open_nursery() as nursery:
                await nursery.start(app.serve)
                await trio.sleep(2.5)
                nursery.cancel_scope.cancel()

    trio.run(serve)
    db = ["--db", str(database)]
    assert main(["history", *db, "--outcome", "completed", "--json"]) == 0
    rows: list[dict[str, Any]] = json.loads(capsys.readouterr().out)
    assert rows
    run_id = rows[0]["run_id"]

    assert main(["show", run_id, *db, "--json"]) == 0
    shown = json.loads(capsys.readouterr().out)
    assert shown["output"]["stdout_bytes"] == 100_000
    assert shown["output"]["stdout"].endswith("line 9999\n")
    assert shown["output"]["stderr"] == "a warning\n"

    assert main(["show", run_id, *db]) == 0
    text = capsys.readouterr().out
    assert "output      stdout 100000 B, stderr 10 B" in text
    assert f"--- stdout (100000 B, its last {OUTPUT_TAIL_BYTES} B shown) ---" in text
    assert "--- stderr (10 B) ---\na warning\n" in text
    assert text.rstrip().endswith("a warning")
