"""Six simulated hours of triggers, in well under a second.

Three triggers are scheduled on a SQLite store (an in-memory database) and served by a real
scheduler, but time is simulated: ``trio.testing.MockClock`` drives every Trio timer and
``TrioWallClock`` derives the wall clock from it, so the hours pass as fast as the CPU allows.

* ``hourly-report`` fires at the top of every hour (``skip``: a slow run makes it skip);
* ``quarter-sync`` fires every 15 minutes, but each run takes 20 minutes, so with
  ``buffer-one`` the boundary that arrives while a run is active is buffered and launched as
  soon as that run settles;
* ``flaky-export`` fires every 2 hours and its runs fail every other time.

The runner is a tiny in-process one: ``start`` deduplicates by idempotency key (as every runner
must), runs "take" a chosen simulated duration, and ``inspect`` reports how they ended.

Run it with ``.venv/bin/python examples/simulated_hourly.py``.
"""

from __future__ import annotations

from collections import Counter

import pendulum
import trio
import trio.testing

from trio_triggers import (
    HistoryQuery,
    RunState,
    SchedulerOptions,
    StartRequest,
    Trigger,
    TrioWallClock,
    fires,
    open_scheduler,
    open_sqlite_trigger_store,
    summaries,
)

START = pendulum.datetime(2026, 3, 2, 8, 30, tz="UTC")  # a Monday morning, 08:30 UTC
HOURS = 6


DURATION_S = {"report": 10 * 60, "sync": 20 * 60, "export": 5 * 60}


class TinyRunner:
    """Runs that take a fixed simulated time per flow; ``flaky`` fails every other run."""

    def __init__(self) -> None:
        self.by_key: dict[str, str] = {}
        self.ends: dict[str, tuple[float, RunState]] = {}
        self.exports = 0

    async def start(self, request: StartRequest) -> str:
        await trio.lowlevel.checkpoint()
        if request.idempotency_key in self.by_key:  # a retried launch gets the same run
            return self.by_key[request.idempotency_key]
        run_id = f"{request.flow_id}-{len(self.by_key) + 1}"
        self.by_key[request.idempotency_key] = run_id
        outcome: RunState = "completed"
        if request.flow_id == "export":
            self.exports += 1
            outcome = "failed" if self.exports % 2 == 0 else "completed"
        self.ends[run_id] = (trio.current_time() + DURATION_S[request.flow_id], outcome)
        return run_id

    async def inspect(self, run_id: str) -> RunState:
        await trio.lowlevel.checkpoint()
        if run_id not in self.ends:
            return "missing"
        ends_at, outcome = self.ends[run_id]
        return "active" if trio.current_time() < ends_at else outcome

    async def cancel(self, run_id: str) -> None:
        await trio.lowlevel.checkpoint()
        if run_id in self.ends:
            self.ends[run_id] = (trio.current_time(), "cancelled")


def when(ms: int) -> str:
    return pendulum.from_timestamp(ms / 1000, tz="UTC").format("ddd HH:mm")


async def main() -> None:
    clock = TrioWallClock(int(START.timestamp() * 1000))
    runner = TinyRunner()
    async with open_sqlite_trigger_store(":memory:", clock=clock) as store:
        for trigger in (
            Trigger(
                id="hourly-report",
                flow_id="report",
                input={"to": "ops"},
                cron="0 * * * *",
                timezone="UTC",
            ),
            Trigger(
                id="quarter-sync",
                flow_id="sync",
                input=None,
                cron="*/15 * * * *",
                timezone="UTC",
                overlap="buffer-one",
            ),
            Trigger(
                id="flaky-export",
                flow_id="export",
                input=[1, 2],
                cron="0 */2 * * *",
                timezone="UTC",
            ),
        ):
            await store.register(trigger)
        options = SchedulerOptions(run_poll_interval=60, host="example")
        async with (
            open_scheduler(store, runner, options=options, clock=clock) as scheduler,
            trio.open_nursery() as nursery,
        ):
            await nursery.start(scheduler.serve)
            await trio.sleep(HOURS * 3600)
            nursery.cancel_scope.cancel()

        print(f"simulated {HOURS} h from {START.format('ddd YYYY-MM-DD HH:mm')} UTC\n")
        print(f"{'trigger':<15} {'occurrence':<10} {'outcome':<11} {'run':<10} error")
        page = await fires(store, HistoryQuery(limit=500))
        for row in reversed(page.items):
            print(
                f"{row.trigger_id:<15} {when(row.occurrence):<10} {row.outcome or 'claimed':<11} "
                f"{row.run_id or '':<10} {row.error or ''}"
            )
        counts = Counter((row.trigger_id, row.outcome) for row in page.items)
        print("\nsettled:", ", ".join(f"{t} {o}={n}" for (t, o), n in sorted(counts.items())))
        print(
            "\n(buffered = arrived while a run was active and was coalesced into a later"
            " occurrence;\n launched = still running when the simulation stopped)"
        )
        print("\nnext occurrences:")
        for summary in await summaries(store, clock):
            upcoming = ", ".join(when(o) for o in summary.next_occurrences[:3])
            print(f"  {summary.trigger_id:<15} {upcoming}")


if __name__ == "__main__":
    trio.run(main, clock=trio.testing.MockClock(autojump_threshold=0))
