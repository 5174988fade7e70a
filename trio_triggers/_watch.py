"""State a Trio task can wait on: a read-only view of a ``trio_util.AsyncValue``.

A scheduler's next attention instant, whether its loop is asleep, how many runs a runner is
executing: an application (a readiness probe, a dashboard) and a test both want to *wait* for
such a value instead of polling it. ``trio_util.AsyncValue`` is the tool: ``await
value.wait_value(predicate)`` returns as soon as the predicate holds (at once if it already
does), ``wait_transition`` on the next matching change, with no polling interval to tune and
nothing to miss between polls. (Its ``move_on_when``, typed here too, races a block against a
task without a hand-written nursery.)

The owner of the state holds a :class:`Published` (it writes); everyone else gets its
:class:`Watched` view (read and wait, never write). ``trio_util`` ships no type information,
so this module is also where its API gets its types.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Generic, TypeVar, cast, final

import trio_util

if TYPE_CHECKING:
    from collections.abc import Awaitable, Callable
    from contextlib import AbstractAsyncContextManager

    import trio

__all__ = ["Published", "Watched", "move_on_when"]

T = TypeVar("T")


def _any_transition(value: object, old: object) -> bool:
    return True


@final
class Watched(Generic[T]):
    """A read-only value you can wait on (a view of a ``trio_util.AsyncValue``).

    * ``value``: the current value;
    * ``await watched.wait_value(v_or_predicate, held_for=0.0)``: return once the value equals
      ``v`` (or the predicate holds), at once if it already does; with ``held_for`` (seconds)
      it must hold that long without interruption. Answers the matching value;
    * ``await watched.wait_transition(v_or_predicate=None)``: return at the next *change* to
      ``v`` (or whose ``(new, old)`` satisfies the predicate; any change by default). Answers
      ``(new, old)``.

    As with any Trio wait, the value may have changed again by the time the waiter runs.
    """

    __slots__ = ("_source",)

    def __init__(self, source: Any) -> None:
        self._source = source

    @property
    def value(self) -> T:
        """The current value."""
        return cast("T", self._source.value)

    async def wait_value(
        self, value_or_predicate: T | Callable[[T], bool], *, held_for: float = 0.0
    ) -> T:
        """Wait until the value equals ``value_or_predicate`` (or the predicate holds)."""
        found = await self._source.wait_value(value_or_predicate, held_for=held_for)
        return cast("T", found)

    async def wait_transition(
        self, value_or_predicate: T | Callable[[T, T], bool] | None = None
    ) -> tuple[T, T]:
        """Wait for the next change to ``value_or_predicate`` (any change by default)."""
        wanted = _any_transition if value_or_predicate is None else value_or_predicate
        found = await self._source.wait_transition(wanted)
        return cast("tuple[T, T]", found)

    def __repr__(self) -> str:
        return f"Watched({self.value!r})"


class Published(Generic[T]):
    """The writer's side of a :class:`Watched` value: owns the ``trio_util.AsyncValue``.

    Assigning an equal value wakes nobody (``AsyncValue`` compares before it notifies).
    ``Published.flag()`` makes a boolean one over ``trio_util.AsyncBool``.
    """

    __slots__ = ("_source", "view")

    def __init__(self, initial: T, *, _source: Any = None) -> None:
        self._source: Any = trio_util.AsyncValue(initial) if _source is None else _source
        self.view: Watched[T] = Watched(self._source)

    @classmethod
    def flag(cls, initial: bool = False) -> Published[bool]:
        """A boolean value (``trio_util.AsyncBool``)."""
        return Published(initial, _source=trio_util.AsyncBool(initial))

    @property
    def value(self) -> T:
        return cast("T", self._source.value)

    def set(self, value: T) -> None:
        """Publish ``value``; waiters whose condition it meets wake up."""
        self._source.value = value


def move_on_when(
    fn: Callable[..., Awaitable[object]], *args: object
) -> AbstractAsyncContextManager[trio.CancelScope]:
    """``trio_util.move_on_when``, typed: run the block, and cancel it once ``fn(*args)``
    returns (the block's end cancels ``fn``). Yields the block's cancel scope, whose
    ``cancelled_caught`` tells whether ``fn`` ended it."""
    manager: AbstractAsyncContextManager[trio.CancelScope] = trio_util.move_on_when(fn, *args)
    return manager
