"""A claiming process for the cross-process contention test (run as a script).

``python claimer.py <db path> <triggers> <occurrences>`` opens the SQLite trigger store on the
file and claims every occurrence of every trigger, interleaving triggers; it prints one JSON
line per granted reservation: ``[trigger_id, occurrence, action, reservation_id]``.
"""

from __future__ import annotations

import json
import sys

import trio

from trio_triggers import SystemWallClock, TriggerError
from trio_triggers._store import open_sqlite_trigger_store


async def main(path: str, triggers: int, occurrences: int) -> None:
    async with open_sqlite_trigger_store(path, clock=SystemWallClock()) as store:
        for occurrence in range(1, occurrences + 1):
            for index in range(triggers):
                trigger_id = f"t{index}"
                try:
                    claim = await store.claim_fire(trigger_id, occurrence, expected_revision=1)
                except TriggerError as error:
                    print(json.dumps(["error", error.code, error.message]), flush=True)
                    raise
                if claim.reservation_id is not None:
                    line = [trigger_id, occurrence, claim.action, claim.reservation_id]
                    print(json.dumps(line), flush=True)


if __name__ == "__main__":
    trio.run(main, sys.argv[1], int(sys.argv[2]), int(sys.argv[3]))
