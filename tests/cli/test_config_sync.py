"""``run --config`` syncs the declared triggers: only what changed is written.

A restart with an unchanged 100 000-trigger config must not rewrite (or even re-encode) every
row; and re-applying a config must never bump a revision (a revision bump fences every claim
in flight). The sync compares the config with one listing and hands the store only the
triggers that are new or differ.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, cast

from trio_triggers import SystemWallClock, Trigger
from trio_triggers._databases import open_stores
from trio_triggers.cli._commands import sync_triggers

if TYPE_CHECKING:
    from collections.abc import Sequence
    from pathlib import Path

    from trio_triggers._store import TriggerStore


class Recording:
    """A store proxy that records what the sync asks it to register."""

    def __init__(self, store: TriggerStore) -> None:
        self._store = store
        self.registered: list[list[str]] = []

    async def register_many(self, triggers: Sequence[Trigger]) -> object:
        self.registered.append([trigger.id for trigger in triggers])
        return await self._store.register_many(triggers)  # type: ignore[attr-defined]

    async def register(self, trigger: Trigger) -> object:
        self.registered.append([trigger.id])
        return await self._store.register(trigger)

    def __getattr__(self, name: str) -> object:
        return getattr(self._store, name)


def declared(count: int, *, hour: int = 3) -> list[Trigger]:
    return [
        Trigger(id=f"t{index:03d}", flow_id="job", input={}, cron=f"{index % 60} {hour} * * *")
        for index in range(count)
    ]


async def test_an_unchanged_config_writes_nothing_and_keeps_revisions(tmp_path: Path) -> None:
    async with open_stores(str(tmp_path / "tt.db"), clock=SystemWallClock()) as (store, _):
        recording = Recording(store)
        proxy = cast("TriggerStore", recording)
        changed, before = await sync_triggers(proxy, declared(30))
        assert sorted(changed) == [f"t{index:03d}" for index in range(30)]
        assert before == []
        assert recording.registered == [[f"t{index:03d}" for index in range(30)]]
        revisions = {
            row.trigger_id: row.trigger.revision for row in await store.list() if row.trigger
        }

        recording.registered.clear()
        changed, before = await sync_triggers(proxy, declared(30))
        assert changed == []
        assert recording.registered == []  # nothing handed to the store at all
        assert sorted(row.trigger_id for row in before) == sorted(revisions)
        after = {row.trigger_id: row.trigger.revision for row in await store.list() if row.trigger}
        assert after == revisions


async def test_only_the_changed_declarations_are_registered(tmp_path: Path) -> None:
    async with open_stores(str(tmp_path / "tt.db"), clock=SystemWallClock()) as (store, _):
        recording = Recording(store)
        proxy = cast("TriggerStore", recording)
        await sync_triggers(proxy, declared(30))
        recording.registered.clear()

        edited = declared(30)
        edited[7] = Trigger(id="t007", flow_id="job", input={}, cron="0 4 * * *")
        edited.append(Trigger(id="new", flow_id="job", input={}, cron="0 5 * * *"))
        changed, _ = await sync_triggers(proxy, edited)
        assert changed == ["t007", "new"]
        assert recording.registered == [["t007", "new"]]
        rows = {row.trigger_id: row.trigger for row in await store.list() if row.trigger}
        assert rows["t007"].cron == "0 4 * * *"
        assert rows["t007"].revision == 2
        assert rows["t008"].revision == 1
        assert rows["new"].revision == 1
