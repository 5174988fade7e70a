"""A scripted owner-side store for the heartbeat-loop tests: only heartbeat and reconfirm."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import cast

import trio

from trio_triggers import RunStoreError, WallClock
from trio_triggers._ownership import FenceLost, NotFound, RunStore, Updated

Answer = Updated | FenceLost | NotFound
Script = Callable[[int], Awaitable[Answer]]


async def updated(now_ms: int) -> Answer:
    await trio.lowlevel.checkpoint()
    return Updated()


async def not_found(now_ms: int) -> Answer:
    await trio.lowlevel.checkpoint()
    return NotFound()


async def fence_lost(now_ms: int) -> Answer:
    await trio.lowlevel.checkpoint()
    return FenceLost()


async def failing(now_ms: int) -> Answer:
    await trio.lowlevel.checkpoint()
    raise RunStoreError("persistence_failed", "heartbeat", "scripted failure")


async def hanging(now_ms: int) -> Answer:
    await trio.sleep_forever()


class ScriptedStore:
    """Records every call as (sent reading, wall time at the call) and answers by script."""

    def __init__(
        self, clock: WallClock, heartbeat: Script = updated, reconfirm: Script = not_found
    ) -> None:
        self.clock = clock
        self.heartbeat_script = heartbeat
        self.reconfirm_script = reconfirm
        self.heartbeats: list[int] = []
        self.reconfirms: list[int] = []
        self.cancelled_heartbeats = 0

    async def heartbeat(self, run_id: str, owner: object, now_ms: int) -> Answer:
        self.heartbeats.append(now_ms)
        try:
            return await self.heartbeat_script(now_ms)
        except trio.Cancelled:
            self.cancelled_heartbeats += 1
            raise

    async def reconfirm(self, run_id: str, owner: object, now_ms: int) -> Answer:
        self.reconfirms.append(now_ms)
        return await self.reconfirm_script(now_ms)

    @property
    def as_store(self) -> RunStore:
        return cast("RunStore", self)
