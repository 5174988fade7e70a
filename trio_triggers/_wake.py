"""The registration notifier: waking the schedulers of a store when a trigger is registered.

A scheduler's supervisor loop sleeps until the earliest next occurrence of any enabled trigger
(capped by ``poll_interval``). A registration changes that answer, so it must wake the loop.

The wake-up has one owner: **the store**. Every built-in store calls
:func:`notify_registered(self) <notify_registered>` at the end of a successful ``register`` (and
``register_many``), and every ``trio_triggers.testing`` wrapper does the same for itself; every
scheduler opened on that store object (in this process) then wakes at once. ``Scheduler.register``
only delegates to the store: the store is the one path every registration takes (the CLI, a
config apply, a test, an application calling ``store.register``), so that is where the
notification lives, once. A store of your own (or a wrapper, which is a store object of its
own) calls it too; any other code may call it after changing a declaration behind the store's
back. The hub holds only weak references to stores, and subscriptions end when their scheduler
block exits, so nothing here outlives the objects it serves.
"""

from __future__ import annotations

import weakref
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from collections.abc import Callable

__all__ = ["notify_registered", "subscribe"]

_by_store: weakref.WeakKeyDictionary[object, dict[int, Callable[[], None]]] = (
    weakref.WeakKeyDictionary()
)
_by_id: dict[int, dict[int, Callable[[], None]]] = {}
_next_token = 0


def _table(store: object, create: bool) -> dict[int, Callable[[], None]] | None:
    try:
        table = _by_store.get(store)
        if table is None and create:
            table = _by_store[store] = {}
        return table
    except TypeError:  # not weakly referenceable: fall back to its id while subscribed
        table = _by_id.get(id(store))
        if table is None and create:
            table = _by_id[id(store)] = {}
        return table


def subscribe(store: object, callback: Callable[[], None]) -> Callable[[], None]:
    """Call ``callback`` (synchronously) after each registration on ``store``.

    Answers a function that ends the subscription.
    """
    global _next_token
    _next_token += 1
    token = _next_token
    table = _table(store, create=True)
    assert table is not None
    table[token] = callback

    def unsubscribe() -> None:
        current = _table(store, create=False)
        if current is not None:
            current.pop(token, None)
            if not current and id(store) in _by_id:
                del _by_id[id(store)]

    return unsubscribe


def notify_registered(store: object) -> None:
    """Wake every scheduler of this process that was opened on ``store``."""
    table = _table(store, create=False)
    if table:
        for callback in list(table.values()):
            callback()
