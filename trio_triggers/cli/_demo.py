"""``trio-triggers demo``: a scripted week of schedules under a simulated clock.

Everything real runs here (the scheduler, the memory trigger store, the LocalRunner on a memory
run store, the heartbeat leases), but the clock is ``trio.testing.MockClock`` with autojump and
wall time is ``TrioWallClock``: a simulated week takes a second or two.

The script (America/New_York, from Friday 2026-03-06 00:00 EST):

* ``skip``      Fri 09:00-09:30 every 10 min, runs take 15 min: the overlapping boundaries are
  skipped;
* ``buffer``    Sat, same shape with ``buffer-one``: one boundary waits and runs afterwards;
* ``supersede`` Mon, same shape with ``supersede``: a new boundary cancels the running one;
* ``dst``       02:30 on 7, 8 and 9 March: on Sunday 8 March 02:30 does not exist (clocks jump to
  03:30), so that night it fires at 03:30 EDT;
* ``report``    Tue 12:00, a 40-minute run saving progress every 5 minutes;
* ``nightly``   noon every day, ``catch_up="all"`` with ``buffer-one``.

On Tuesday at 12:22 the process crashes (its run store writes fail, nothing is handed back) with
``report`` half done; it restarts on Thursday at 13:00: the expired lease lets the new process
take ``report`` over and run it again from its saved progress, and ``nightly`` catches up the
noons it missed.
"""

from __future__ import annotations

import datetime
import sys
import zoneinfo
from typing import Any

import msgspec
import trio
import trio.testing

from .._clock import TrioWallClock, WallClock
from .._declarations import Trigger
from .._errors import RunStoreError
from .._local_runner import RunContext, open_local_runner
from .._ownership import MemoryRunStore, OwnerId, RunStatus, lease_liveness
from .._scheduler import SchedulerOptions, open_scheduler
from .._store import MemoryTriggerStore, Result

__all__ = ["run_demo"]

ZONE = zoneinfo.ZoneInfo("America/New_York")
START = datetime.datetime(2026, 3, 6, 0, 0, tzinfo=ZONE)
CRASH = datetime.datetime(2026, 3, 10, 12, 22, tzinfo=ZONE)
RESTART = datetime.datetime(2026, 3, 12, 13, 0, tzinfo=ZONE)
END = datetime.datetime(2026, 3, 13, 0, 0, tzinfo=ZONE)

TZ = "America/New_York"
TRIGGERS: list[dict[str, Any]] = [
    {"id": "skip", "flow_id": "work-15m", "cron": "0-30/10 9 6 3 *", "overlap": "skip"},
    {"id": "buffer", "flow_id": "work-15m", "cron": "0-30/10 9 7 3 *", "overlap": "buffer-one"},
    {"id": "supersede", "flow_id": "work-15m", "cron": "0-30/10 9 9 3 *", "overlap": "supersede"},
    {"id": "dst", "flow_id": "work-1m", "cron": "30 2 7-9 3 *"},
    {"id": "report", "flow_id": "report-40m", "cron": "0 12 10 3 *"},
    {
        "id": "nightly",
        "flow_id": "work-5m",
        "cron": "0 12 * * *",
        "overlap": "buffer-one",
        "catch_up": "all",
        "max_catch_up": 5,
    },
]

LESSONS = [
    "skip: 09:10 and 09:30 found a run still going and were skipped (recorded, never run).",
    "buffer-one: a boundary that found a run going waited in the single buffer slot and "
    "launched when the run finished.",
    "supersede: each new boundary cancelled the running run (ledger: superseded) and started "
    "its own.",
    "dst: 02:30 does not exist on Sun 8 March (02:00 EST jumps to 03:00 EDT); that night the "
    "trigger fired at 03:30 EDT, every other night at 02:30 local time.",
    "crash: report's run was half done when the process died; after restart its lease had "
    "expired, the new process took it over and ran it again from its saved progress "
    "(at-least-once execution).",
    "catch-up: nightly missed the noons of 11 and 12 March while the process was down; on "
    "restart it fired every missed boundary (catch_up=all, max_catch_up=5).",
]


class _Events:
    def __init__(self, clock: WallClock, json_output: bool) -> None:
        self.clock = clock
        self.json = json_output
        self.names: dict[str, str] = {}
        self.lines: list[str] = []

    def run_name(self, run_id: str | None) -> str:
        if run_id is None or run_id.startswith("trigger-reservation:"):
            return ""
        if run_id not in self.names:
            self.names[run_id] = f"run-{len(self.names) + 1}"
        return self.names[run_id]

    def local(self, ms: int) -> str:
        at = datetime.datetime.fromtimestamp(ms / 1000, tz=datetime.UTC).astimezone(ZONE)
        return at.strftime("%a %m-%d %H:%M %Z")

    def emit(self, kind: str, text: str, **fields: Any) -> None:
        now = self.clock.now_ms()
        if self.json:
            payload = {"at": now, "at_local": self.local(now), "event": kind, **fields}
            line = msgspec.json.encode(payload).decode()
        else:
            line = f"{self.local(now)}  {text}"
        self.lines.append(line)
        print(line, flush=True)


class _DemoTriggerStore(MemoryTriggerStore):
    """A memory trigger store that reports every recorded result to the timeline."""

    def __init__(self, *, clock: WallClock, events: _Events) -> None:
        super().__init__(clock=clock)
        self._events = events

    async def record_result(self, result: Result) -> None:
        await super().record_result(result)
        if result.outcome == "launched":
            # a repeat of a launch (recovery) is reported once per run
            key = ("launched", result.trigger_id, result.occurrence, result.run_id)
            if key in _seen:
                return
            _seen.add(key)
        occurrence = self._events.local(result.occurrence)[4:15]
        run = self._events.run_name(result.run_id)
        self._events.emit(
            "fire",
            f"{result.trigger_id:<10} {occurrence:<11} {result.outcome:<11} {run}".rstrip(),
            trigger_id=result.trigger_id,
            occurrence=result.occurrence,
            outcome=result.outcome,
            run=run or None,
        )


_seen: set[tuple[str, str, int, str | None]] = set()


class _CrashableRunStore(MemoryRunStore):
    """A memory run store whose owned writes fail once the "process" has crashed."""

    crashed = False

    def _check(self, method: str) -> None:
        if self.crashed:
            raise RunStoreError("persistence_failed", method, "the process has crashed")

    async def heartbeat(self, run_id: str, owner: OwnerId, now_ms: int) -> Any:
        self._check("heartbeat")
        return await super().heartbeat(run_id, owner, now_ms)

    async def transition_owned(
        self, run_id: str, owner: OwnerId, to_status: RunStatus, **kwargs: Any
    ) -> Any:
        self._check("transition_owned")
        outcome = await super().transition_owned(run_id, owner, to_status, **kwargs)
        return outcome


def _ms(at: datetime.datetime) -> int:
    return int(at.timestamp() * 1000)


async def _demo(json_output: bool) -> list[str]:
    _seen.clear()
    clock = TrioWallClock(_ms(START))
    events = _Events(clock, json_output)
    triggers = _DemoTriggerStore(clock=clock, events=events)
    runs = _CrashableRunStore(clock=clock)

    async def work(minutes: int) -> Any:
        async def flow(input: Any, run: RunContext) -> Any:
            await trio.sleep(minutes * 60)
            return {"minutes": minutes}

        return flow

    async def report(input: Any, run: RunContext) -> Any:
        step = (run.state or {}).get("step", 0)
        if step:
            events.emit(
                "resume",
                f"{'report':<10} {'':<11} {'resumed':<11} {events.run_name(run.run_id)} "
                f"by the new process from saved step {step}/8",
                step=step,
            )
        while step < 8:
            await trio.sleep(300)
            step += 1
            await run.save_state({"step": step})
        return {"steps": step}

    flows = {
        "work-15m": await work(15),
        "work-5m": await work(5),
        "work-1m": await work(1),
        "report-40m": report,
    }
    for declaration in TRIGGERS:
        await triggers.register(Trigger.make({"input": {}, "timezone": TZ, **declaration}))
    options = SchedulerOptions(poll_interval=900, run_poll_interval=60)

    async def process(name: str, until: datetime.datetime, *, crash: bool) -> None:
        owner = OwnerId(host_id="demo-host", pid=1 if name == "first" else 2, nonce=name)
        async with (
            open_local_runner(
                runs,
                flows,
                clock=clock,
                owner=owner,
                poll_interval=60,
                cancel_poll_interval=60,
                # one real process hosts both simulated ones: decide by the lease alone
                liveness=lease_liveness(),
            ) as runner,
            open_scheduler(triggers, runner, options=options, clock=clock) as scheduler,
            trio.open_nursery() as nursery,
        ):
            await nursery.start(scheduler.serve)
            await trio.sleep((_ms(until) - clock.now_ms()) / 1000)
            if crash:
                runs.crashed = True
                events.emit("crash", "-- the process crashes (nothing is handed back) --")
            nursery.cancel_scope.cancel()

    events.emit("start", "-- the process starts --")
    await process("first", CRASH, crash=True)
    await trio.sleep((_ms(RESTART) - clock.now_ms()) / 1000)
    runs.crashed = False
    events.emit("restart", "-- the process restarts, two days later --")
    await process("second", END, crash=False)
    events.emit("end", "-- end of the simulated week --")
    return events.lines


def run_demo(*, json_output: bool = False) -> int:
    """Run the demo and print its timeline; returns the exit status."""
    if not json_output:
        print("trio-triggers demo: one simulated week in America/New_York (MockClock)\n")
        print(f"{'when':<19}  {'trigger':<10} {'boundary':<11} {'outcome':<11} run")
    import logging

    quiet = logging.getLogger("trio_triggers")
    previous = quiet.level
    quiet.setLevel(logging.CRITICAL)  # the crash is deliberate: keep its warnings off stderr
    try:
        trio.run(_demo, json_output, clock=trio.testing.MockClock(autojump_threshold=0))
    finally:
        quiet.setLevel(previous)
    if not json_output:
        print("\nWhat happened:")
        for lesson in LESSONS:
            print(f"  * {lesson}")
    sys.stdout.flush()
    return 0
