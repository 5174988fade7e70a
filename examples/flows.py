"""Python flows for examples/triggers.toml: ``async def flow(input, run) -> result``."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import trio

if TYPE_CHECKING:
    from trio_triggers import RunContext


async def report(input: dict[str, Any], run: RunContext) -> dict[str, Any]:
    """Render ``input["pages"]`` pages, saving progress after each one.

    If the process dies mid-run, the run is executed again after its lease expires, starting
    from the saved ``run.state``: pages already rendered are not rendered twice.
    """
    done: int = (run.state or {}).get("pages_done", 0)
    while done < input["pages"]:
        await trio.sleep(0.2)  # "render" one page
        done += 1
        await run.save_state({"pages_done": done})
    return {"pages": done, "key": run.idempotency_key}
