"""Process A of the two-process takeover test (run as a script, not collected by pytest).

``python _owner_process.py DB RUN_ID HOST_ID``: claims the pending run, holds its lease and
reports on stdout, one JSON object per line: ``{"owned": ...}`` once it owns the run, then,
after it has lost the lease, the reason and the outcomes of an explicit heartbeat and of its
final ``transition_owned``.
"""

from __future__ import annotations

import json
import sys

import trio

from trio_triggers import LeaseLost, SystemWallClock
from trio_triggers._ownership import OwnerId, hold_lease, open_sqlite_run_store


def say(**data: object) -> None:
    print(json.dumps(data), flush=True)


async def main(path: str, run_id: str, host_id: str) -> None:
    clock = SystemWallClock()
    me = OwnerId.for_this_process(host_id)
    async with open_sqlite_run_store(path, clock=clock) as store:
        row = await store.get(run_id)
        outcome = await store.claim_and_own(run_id, row, me, clock.now_ms())
        say(owned=type(outcome).__name__, nonce=me.nonce)
        try:
            async with hold_lease(store, run_id, me, clock=clock):
                await trio.sleep_forever()
        except LeaseLost as lost:
            say(lease_lost=lost.reason)
        beat = await store.heartbeat(run_id, me, clock.now_ms())
        done = await store.transition_owned(run_id, me, "completed", result_json='"from A"')
        say(heartbeat=type(beat).__name__, transition=type(done).__name__)


if __name__ == "__main__":
    path, run_id, host_id = sys.argv[1:4]
    trio.run(main, path, run_id, host_id)
