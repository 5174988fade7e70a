"""What the local runner logs while its store fails: one line when a spell starts, one when it
ends, and no false "takeover" (docs/faults.md, "Connections killed")."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import trio
import trio.testing

from trio_triggers import MemoryRunStore, TrioWallClock
from trio_triggers._local_runner import RunContext, open_local_runner
from trio_triggers._scheduler import StartRequest
from trio_triggers.testing import FaultyRunStore

if TYPE_CHECKING:
    import pytest

EPOCH = 1_800_000_000_000


def _messages(caplog: pytest.LogCaptureFixture) -> list[str]:
    return [r.getMessage() for r in caplog.records if r.name == "trio_triggers.local_runner"]


async def test_a_failing_spell_of_looks_for_runs_is_two_lines(
    autojump_clock: trio.testing.MockClock, caplog: pytest.LogCaptureFixture
) -> None:
    """Ten failed polls in a row used to be ten warnings; now one, and one when it ends."""
    clock = TrioWallClock(EPOCH)
    runs = FaultyRunStore(MemoryRunStore(clock=clock))

    async def flow(value: Any, run: RunContext) -> str:
        return "done"

    with caplog.at_level("WARNING", logger="trio_triggers"):
        async with open_local_runner(runs, {"f": flow}, clock=clock, poll_interval=0.5):
            await trio.sleep(1)
            runs.fail_next("find_claimable", 10)
            await trio.sleep(10)
    assert _messages(caplog) == [
        "local runner could not look for runs; retrying every poll",
        "local runner can look for runs again",
    ]
    back = next(r for r in caplog.records if r.getMessage().endswith("again"))
    assert back.failed_rounds == 10  # type: ignore[attr-defined]


async def test_a_claim_whose_answer_was_lost_is_no_takeover(
    autojump_clock: trio.testing.MockClock, caplog: pytest.LogCaptureFixture
) -> None:
    """A ``claim_and_own`` that committed but failed to answer is read back as ``running``
    under this owner: the run executes once, and nobody "took over a run whose owner died"
    (the log used to say so, naming this very process as the dead owner)."""
    clock = TrioWallClock(EPOCH)
    runs = FaultyRunStore(MemoryRunStore(clock=clock))
    executed: list[str] = []

    async def flow(value: Any, run: RunContext) -> str:
        executed.append(run.run_id)
        return "done"

    with caplog.at_level("WARNING", logger="trio_triggers"):
        async with open_local_runner(runs, {"f": flow}, clock=clock) as runner:
            runs.fail_next("claim_and_own", 1, after_commit=True)
            run_id = await runner.start(StartRequest("f", None, "k1"))
            with trio.fail_after(30):
                while await runner.inspect(run_id) == "active":  # noqa: ASYNC110 - a store read
                    await trio.sleep(0.5)
    assert executed == [run_id]
    assert not [m for m in _messages(caplog) if "took over" in m]
