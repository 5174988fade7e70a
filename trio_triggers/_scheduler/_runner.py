"""The runner protocol (``triggers.md`` §11) and the do-nothing runner.

A runner is whatever actually executes a flow. The scheduler needs only three calls from it:
``start`` (which must deduplicate by idempotency key, because the scheduler launches *at least*
once per claimed occurrence), ``inspect`` and ``cancel``.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any, Literal, Protocol, final, runtime_checkable

import msgspec
import trio

__all__ = ["RUN_STATES", "NoopRunner", "RunEndSignal", "RunState", "Runner", "StartRequest"]

RunState = Literal["active", "completed", "failed", "cancelled", "missing"]
RUN_STATES: frozenset[str] = frozenset({"active", "completed", "failed", "cancelled", "missing"})


class StartRequest(msgspec.Struct, frozen=True):
    """What the scheduler asks a runner to start.

    ``idempotency_key`` is ``"<trigger id>:<ISO occurrence>"``: the same for every attempt, every
    process and every scheduler instance, so a runner that deduplicates by it hands back the same
    run when a launch is retried. The contract writes it positionally
    (``StartRequest(flow_id, input, idempotency_key)``), so positional and keyword construction
    both work.
    """

    flow_id: str
    input: Any
    idempotency_key: str


@runtime_checkable
class Runner(Protocol):
    """Starts, inspects and cancels runs on behalf of the scheduler."""

    async def start(self, request: StartRequest) -> str:
        """Start (or find) the run for ``request.idempotency_key``; answer its run id."""
        ...

    async def inspect(self, run_id: str) -> RunState:
        """Answer the run's state; ``"missing"`` when the id is unknown."""
        ...

    async def cancel(self, run_id: str) -> None:
        """Ask the run to stop; idempotent."""
        ...


@runtime_checkable
class RunEndSignal(Protocol):
    """An optional runner capability: tell the scheduler that a run has ended.

    A scheduler learns how a run ended by inspecting it every ``run_poll_interval``; a runner
    that can tell when a run ends (the embedded :class:`~trio_triggers.LocalRunner` executes its
    runs in this very process) implements ``wait_ended`` as well, and the scheduler's monitor
    then wakes as soon as the run ends and settles it within milliseconds. A runner that
    answers the terminal state it has durably written spares the monitor its inspection;
    otherwise inspection stays the source of truth (the monitor inspects after waking, and
    still at least every ``run_poll_interval``), so a runner that cannot tell (one in another
    service, or a run that another process executes) simply does not implement this, and
    nothing else changes.
    """

    async def wait_ended(self, run_id: str) -> RunState | None:
        """Return once ``run_id`` has reached a terminal state in this runner.

        May wait indefinitely for a run this runner never executes (the scheduler bounds the
        wait); must return promptly for a run that already ended here recently. Answer the
        terminal state (``completed``, ``failed``, ``cancelled``) only when this runner's own
        write of it has committed: the scheduler then records it without inspecting. ``None``
        (or a spurious return) is allowed: the scheduler inspects before it believes anything.
        """
        ...


StartFn = Callable[[StartRequest], Awaitable[str]]
InspectFn = Callable[[str], Awaitable[RunState]]
CancelFn = Callable[[str], Awaitable[None]]


@final
class NoopRunner:
    """A runner that runs nothing.

    ``start`` answers the idempotency key as the run id (so it deduplicates trivially),
    ``inspect`` answers ``"completed"`` and ``cancel`` does nothing. Each keyword replaces that
    one method with the given async callable.
    """

    def __init__(
        self,
        *,
        start: StartFn | None = None,
        inspect: InspectFn | None = None,
        cancel: CancelFn | None = None,
    ) -> None:
        self._start = start
        self._inspect = inspect
        self._cancel = cancel

    async def start(self, request: StartRequest) -> str:
        if self._start is not None:
            return await self._start(request)
        await trio.lowlevel.checkpoint()
        return request.idempotency_key

    async def inspect(self, run_id: str) -> RunState:
        if self._inspect is not None:
            return await self._inspect(run_id)
        await trio.lowlevel.checkpoint()
        return "completed"

    async def cancel(self, run_id: str) -> None:
        if self._cancel is not None:
            await self._cancel(run_id)
        else:
            await trio.lowlevel.checkpoint()

    def __repr__(self) -> str:
        return "NoopRunner()"
