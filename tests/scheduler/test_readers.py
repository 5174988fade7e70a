"""Dashboard readers ``summaries`` and ``fires`` (``triggers.md`` §14.4)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import msgspec
import pytest

from trio_triggers._declarations import Trigger
from trio_triggers._errors import TriggerError
from trio_triggers._scheduler import fires, summaries
from trio_triggers._store._models import Fire, HistoryQuery, Listed, Result

from .harness import H, RecordingStore, Sim, UnavailableStore, const

if TYPE_CHECKING:
    from trio.testing import MockClock

HOURLY = Trigger(
    id="hourly",
    flow_id="review",
    input={"source": "schedule"},
    cron="0 * * * *",
    timezone="UTC",
    overlap="buffer-one",
    catch_up="one",
    max_catch_up=3,
)
DAILY = Trigger(id="daily", flow_id="lint", input=None, cron="0 9 * * *", enabled=False)


async def register_both(store: RecordingStore) -> None:
    await store.inner.register(HOURLY)
    await store.inner.register(DAILY)


async def test_summaries_of_fresh_triggers(
    autojump_clock: MockClock, sim: Sim, store: RecordingStore
) -> None:
    await register_both(store)
    answer = await summaries(store, sim.clock)
    assert [s.trigger_id for s in answer] == ["daily", "hourly"]
    daily, hourly = answer
    assert msgspec.to_builtins(hourly) == {
        "trigger_id": "hourly",
        "flow_id": "review",
        "input": {"source": "schedule"},
        "cron": "0 * * * *",
        "timezone": "UTC",
        "overlap": "buffer-one",
        "catch_up": "one",
        "max_catch_up": 3,
        "enabled": True,
        "revision": 1,
        "next_occurrences": [H, 2 * H, 3 * H, 4 * H, 5 * H],
        # always present, zeros included (docs/operations.md)
        "missed": {"overlap": 0, "catch_up": 0, "catch_up_bound": 0, "paused": 0},
    }
    assert daily.timezone is None
    assert len(daily.next_occurrences) == 5
    assert "input" in msgspec.to_builtins(daily)  # required, present even when null
    assert msgspec.to_builtins(daily)["input"] is None
    hourly.input["source"] = "mutated"
    again = await summaries(store, sim.clock)
    assert again[1].input == {"source": "schedule"}


async def test_summaries_hide_reservations_and_show_held_state(
    autojump_clock: MockClock, sim: Sim, store: RecordingStore
) -> None:
    await register_both(store)
    claim = await store.inner.claim_fire("hourly", H, expected_revision=1)
    hourly = (await summaries(store, sim.clock))[1]
    assert hourly.active_run_id is None
    assert hourly.last_fired_at is None
    await store.inner.record_result(
        Result(
            trigger_id="hourly",
            occurrence=H,
            outcome="launched",
            run_id="run-1",
            reservation_id=claim.reservation_id,
        )
    )
    assert (await store.inner.claim_fire("hourly", 2 * H, expected_revision=1)).action == "buffer"
    await sim.advance_to(2 * H + 1)
    await store.inner.heartbeat("box-1")
    hourly = (await summaries(store, sim.clock))[1]
    assert (hourly.active_run_id, hourly.last_fired_at, hourly.pending_at) == (
        "run-1",
        2 * H,
        2 * H,
    )
    assert hourly.scheduler_last_tick == 2 * H + 1
    assert hourly.next_occurrences == [3 * H, 4 * H, 5 * H, 6 * H, 7 * H]


async def ledger_of_three(store: RecordingStore) -> None:
    await store.inner.register(HOURLY)
    claim = await store.inner.claim_fire("hourly", H, expected_revision=1)
    await store.inner.record_result(
        Result(
            trigger_id="hourly",
            occurrence=H,
            outcome="launched",
            run_id="run-1",
            reservation_id=claim.reservation_id,
        )
    )
    await store.inner.claim_fire("hourly", 2 * H, expected_revision=1)
    await store.inner.record_result(
        Result(trigger_id="hourly", occurrence=H, outcome="failed", run_id="run-1", error="exit 1")
    )
    await store.inner.claim_fire("hourly", 3 * H, expected_revision=1)


def rows(page: Any) -> list[tuple[Any, ...]]:
    return [(r.trigger_id, r.occurrence, r.outcome, r.run_id, r.error) for r in page.items]


async def test_fires_pages_and_filters(
    autojump_clock: MockClock, sim: Sim, store: RecordingStore
) -> None:
    await ledger_of_three(store)
    assert rows(await fires(store)) == [
        ("hourly", 3 * H, None, None, None),
        ("hourly", 2 * H, "buffered", None, None),
        ("hourly", H, "failed", "run-1", "exit 1"),
    ]
    assert store.kwargs_of("history") == [{}]
    assert store.args_of("history")[0][0].limit == 100  # DEFAULT_PAGE_SIZE
    assert [r.occurrence for r in (await fires(store, HistoryQuery(run_id="run-1"))).items] == [H]
    buffered = await fires(store, HistoryQuery(trigger_id="hourly", outcome="buffered"))
    assert [r.occurrence for r in buffered.items] == [2 * H]
    assert (await fires(store, HistoryQuery(trigger_id="unknown"))).items == []
    first = await fires(store, HistoryQuery(limit=2))
    assert [r.occurrence for r in first.items] == [3 * H, 2 * H]
    assert first.next_cursor == Fire(trigger_id="hourly", occurrence=2 * H)
    second = await fires(store, HistoryQuery(limit=2, cursor=first.next_cursor))
    assert [r.occurrence for r in second.items] == [H]
    assert second.next_cursor is None
    await fires(store, HistoryQuery(limit=10_000))
    assert store.args_of("history")[-1][0].limit == 500  # MAX_PAGE_SIZE
    with pytest.raises(TriggerError) as info:
        await fires(store, HistoryQuery(limit=0))
    assert (info.value.code, info.value.path) == ("invalid_options", "limit")


async def test_reader_errors_pass_through(autojump_clock: MockClock, sim: Sim) -> None:
    unavailable = RecordingStore(UnavailableStore())
    with pytest.raises(TriggerError) as info:
        await summaries(unavailable, sim.clock)
    assert (info.value.code, info.value.message) == ("store", "last_heartbeat is unavailable")
    with pytest.raises(TriggerError) as info:
        await fires(unavailable)
    assert (info.value.code, info.value.message) == ("store", "history is unavailable")
    broken = RecordingStore(UnavailableStore())
    broken.override["last_heartbeat"] = const(None)
    error = TriggerError("invalid_trigger", "corrupt trigger broken")
    broken.override["list"] = const([Listed(trigger_id="broken", error=error)])
    with pytest.raises(TriggerError) as info:
        await summaries(broken, sim.clock)
    assert info.value is error


async def test_readers_are_spanned(
    autojump_clock: MockClock, sim: Sim, store: RecordingStore, recorder: Any
) -> None:
    await register_both(store)
    await summaries(store, sim.clock)
    await fires(store)
    assert [s.name for s in recorder.spans] == ["DispatchReader.summaries", "DispatchReader.fires"]
