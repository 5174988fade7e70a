"""What the command-flow tests share: a ``RunContext`` with nothing behind it."""

from __future__ import annotations

import trio

from trio_triggers import RunContext


def context() -> RunContext:
    """A context for calling a flow directly: its saves go nowhere, nobody asks it to cancel."""

    async def save(_: str) -> None:
        return None

    return RunContext(
        run_id="run-1",
        flow_id="f",
        idempotency_key=None,
        state=None,
        save=save,
        cancel_seen=trio.Event(),
    )
