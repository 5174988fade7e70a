"""A seam for tests: what a scheduler calls around each tick and each claim.

Testing only. ``trio_triggers.testing``'s simulator passes a :class:`SchedulerHook` to
``open_scheduler(..., _hook=...)`` to check that ticks never overlap and to plant a known bug
in a claim (``docs/simulation.md``, "Proving the checkers"). Applications never pass one; the
default, :data:`NO_HOOK`, only calls through.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from collections.abc import Awaitable, Callable

    from .._declarations import RegisteredTrigger

__all__ = ["NO_HOOK", "SchedulerHook"]


class SchedulerHook:
    """Testing only: wraps a scheduler's tick and its per-occurrence claims.

    Override either method; each must call (or deliberately not call) what it is given.
    """

    async def around_tick(self, tick: Callable[[], Awaitable[None]]) -> None:
        """One tick (§12.5), called under the tick lock; ``tick()`` does the work."""
        await tick()

    async def around_claim(
        self,
        claim: Callable[[RegisteredTrigger, int], Awaitable[None]],
        trigger: RegisteredTrigger,
        occurrence: int,
    ) -> None:
        """One claim and dispatch of ``occurrence`` (§12.9); ``claim(trigger, occurrence)``
        does the work, and what it raises decides what the tick does next."""
        await claim(trigger, occurrence)


#: The hook of every scheduler that was not given one: it only calls through.
NO_HOOK = SchedulerHook()
