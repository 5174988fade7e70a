"""``SchedulerOptions`` validation (``triggers.md`` §12.1, §1.2)."""

from __future__ import annotations

import datetime
import math
from typing import TYPE_CHECKING, Any

import pytest
import trio

from trio_triggers._errors import TriggerError
from trio_triggers._scheduler import NoopRunner, SchedulerOptions, open_scheduler
from trio_triggers._scheduler._options import validate_options
from trio_triggers._store import MemoryTriggerStore

from .harness import Sim

if TYPE_CHECKING:
    from trio.testing import MockClock


def test_defaults() -> None:
    options = SchedulerOptions()
    assert (options.poll_interval, options.run_poll_interval, options.concurrency) == (60, 15, 4)
    assert (options.start_timeout, options.inspect_timeout, options.cancel_timeout) == (
        240,
        30,
        30,
    )
    assert options.fire_retention == datetime.timedelta(days=30)
    assert options.host == "local"
    settings = validate_options(options)
    assert settings.run_poll_interval_ms == 15_000
    assert settings.start_timeout_ms == 240_000
    assert settings.fire_retention_ms == 30 * 86_400_000
    assert validate_options(SchedulerOptions(run_poll_interval=0.0001)).run_poll_interval_ms == 1


@pytest.mark.parametrize(
    ("changes", "path", "message"),
    [
        ({"run_poll_interval": 0}, "run_poll_interval", "finite positive"),
        ({"run_poll_interval": -1}, "run_poll_interval", "finite positive"),
        ({"run_poll_interval": math.inf}, "run_poll_interval", "finite positive"),
        ({"run_poll_interval": math.nan}, "run_poll_interval", "finite positive"),
        ({"run_poll_interval": "nonsense"}, "run_poll_interval", "valid duration"),
        ({"run_poll_interval": True}, "run_poll_interval", "valid duration"),
        ({"concurrency": 0}, "concurrency", None),
        ({"concurrency": 1.5}, "concurrency", None),
        ({"concurrency": True}, "concurrency", None),
        ({"start_timeout": 0}, "start_timeout", "finite positive"),
        ({"inspect_timeout": math.inf}, "inspect_timeout", "finite positive"),
        ({"cancel_timeout": -1}, "cancel_timeout", "finite positive"),
        ({"fire_retention": datetime.timedelta(0)}, "fire_retention", "finite positive"),
    ],
)
async def test_open_scheduler_refuses_bad_options(
    autojump_clock: MockClock, changes: dict[str, Any], path: str, message: str | None
) -> None:
    sim = Sim()
    store = MemoryTriggerStore(clock=sim.clock)
    with pytest.raises(TriggerError) as info:
        async with open_scheduler(
            store, NoopRunner(), options=SchedulerOptions(**changes), clock=sim.clock
        ):
            raise AssertionError("must not open")
    assert (info.value.code, info.value.path) == ("invalid_options", path)
    if message is None:
        assert info.value.message == "concurrency must be a positive integer"
    else:
        kind = "a finite positive duration" if "finite" in message else "a valid duration"
        assert info.value.message == f"{path} must be {kind}"
    assert await store.last_heartbeat() is None  # nothing durable changed


async def test_validation_order_stops_at_first_failure(autojump_clock: MockClock) -> None:
    sim = Sim()
    bad = SchedulerOptions(run_poll_interval=0, concurrency=0, start_timeout=0)
    with pytest.raises(TriggerError) as info:
        async with open_scheduler(MemoryTriggerStore(clock=sim.clock), NoopRunner(), options=bad):
            pass
    assert info.value.path == "run_poll_interval"
    later = SchedulerOptions(concurrency=0, start_timeout=0)
    with pytest.raises(TriggerError) as info:
        async with open_scheduler(MemoryTriggerStore(clock=sim.clock), NoopRunner(), options=later):
            pass
    assert info.value.path == "concurrency"


async def test_serve_validates_poll_interval_before_starting(autojump_clock: MockClock) -> None:
    sim = Sim()
    store = MemoryTriggerStore(clock=sim.clock)
    options = SchedulerOptions(poll_interval=0)
    async with (
        open_scheduler(store, NoopRunner(), options=options, clock=sim.clock) as scheduler,
        trio.open_nursery() as nursery,
    ):
        with pytest.raises(TriggerError) as info:
            await nursery.start(scheduler.serve)
    assert (info.value.code, info.value.path) == ("invalid_options", "poll_interval")
    assert info.value.message == "poll_interval must be a finite positive duration"
    assert await store.last_heartbeat() is None
