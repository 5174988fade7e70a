"""Operator state on any built-in trigger store: pause, resume, remove and backfill
(``docs/operations.md``).

The library calls (:meth:`trio_triggers.Triggers.pause`, ...) and the CLI verbs (``pause``,
``resume``, ``backfill``) all come through here, so they refuse a store without operator state
the same way and name the operator the same way.
"""

from __future__ import annotations

import getpass
import socket
from typing import TYPE_CHECKING

from ._errors import TriggerError
from ._store._engine import EngineStore

if TYPE_CHECKING:
    from ._declarations import Overlap, RegisteredTrigger
    from ._store import Resumed, ResumePoint, TriggerStore

__all__ = [
    "backfill_trigger",
    "cancel_backfill",
    "operator_name",
    "pause_trigger",
    "remove_trigger",
    "resume_trigger",
]


def operator_name() -> str:
    """``user@host`` of this process: who a pause says paused it when nobody says otherwise."""
    try:
        user = getpass.getuser()
    except (KeyError, OSError):  # no passwd entry and no LOGNAME/USER (a bare container)
        user = "unknown"
    return f"{user}@{socket.gethostname()}"


def _engine(store: TriggerStore) -> EngineStore:
    if not isinstance(store, EngineStore):
        raise TriggerError(
            "invalid_options",
            f"{type(store).__name__} keeps no operator state: pause, resume and backfill need "
            "one of "
            "the built-in stores (memory, SQLite, PostgreSQL)",
        )
    return store


async def pause_trigger(
    store: TriggerStore, trigger_id: str, *, note: str | None = None, by: str | None = None
) -> RegisteredTrigger:
    """Pause ``trigger_id`` on ``store`` (``by`` defaults to :func:`operator_name`)."""
    return await _engine(store).pause(trigger_id, note=note, by=by or operator_name())


async def resume_trigger(store: TriggerStore, trigger_id: str, *, point: ResumePoint) -> Resumed:
    """Resume ``trigger_id`` on ``store`` from ``point`` (``"now"`` or ``"policy"``)."""
    return await _engine(store).resume(trigger_id, point=point)


async def remove_trigger(store: TriggerStore, trigger_id: str) -> RegisteredTrigger:
    """Retire ``trigger_id`` on ``store``: disabled and marked removed, history kept."""
    return await _engine(store).remove(trigger_id)


async def backfill_trigger(
    store: TriggerStore,
    trigger_id: str,
    *,
    start: int,
    end: int,
    max_boundaries: int | None = None,
    overlap: Overlap | None = None,
    by: str | None = None,
) -> RegisteredTrigger:
    """Start a backfill of ``trigger_id`` on ``store`` (``by`` defaults to
    :func:`operator_name`); the schedulers carry it out."""
    return await _engine(store).start_backfill(
        trigger_id,
        start=start,
        end=end,
        max_boundaries=max_boundaries,
        overlap=overlap,
        by=by or operator_name(),
    )


async def cancel_backfill(store: TriggerStore, trigger_id: str) -> RegisteredTrigger:
    """Stop ``trigger_id``'s running backfill on ``store`` (none running: no change)."""
    return await _engine(store).cancel_backfill(trigger_id)
