"""``ControlRunner``: a runner on top of an approval-gated control plane (``triggers.md`` §13).

A control plane turns a start request into a *plan* (something a human or a policy may have to
approve) and then runs the plan. The adapter never approves anything: when a plan is parked
awaiting approval it simply offers the same request again, with pauses doubling from 1 s, for
``PARKED_ATTEMPTS`` attempts (about 127 s of waiting, well inside the scheduler's default
``start_timeout`` of 240 s).
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING, Protocol, final, runtime_checkable

import msgspec
import trio

from .._constants import CANCEL_KEY_PREFIX
from .._errors import TriggerError

if TYPE_CHECKING:
    from collections.abc import Sequence

    from ._runner import RunState, StartRequest

__all__ = [
    "CANCEL_KEY_PREFIX",
    "PARKED_ATTEMPTS",
    "Accepted",
    "AlreadyApplied",
    "CancelRequest",
    "Conflict",
    "ControlPlane",
    "ControlRunner",
    "Parked",
    "Plan",
    "PlanRun",
    "Receipt",
    "RunInfo",
    "TerminalReceipt",
]

PARKED_ATTEMPTS = 8

logger = logging.getLogger("trio_triggers.control")


class Plan(msgspec.Struct, frozen=True):
    """A control plane's plan for one start request."""

    plan_id: str
    digest: str
    envelope: object


class PlanRun(msgspec.Struct, frozen=True):
    """A request to run a plan; the same request is offered on every parked attempt."""

    plan_id: str
    digest: str
    envelope: object
    idempotency_key: str


class CancelRequest(msgspec.Struct, frozen=True):
    """A request to cancel a run, keyed ``"trigger-cancel:" + run_id``."""

    run_id: str
    idempotency_key: str


class RunInfo(msgspec.Struct, frozen=True):
    """One run as the control plane lists it."""

    run_id: str
    status: str


class Accepted(msgspec.Struct, frozen=True):
    """A receipt: the control plane accepted the plan; ``run_id`` names the run it started."""

    run_id: str | None = None


class AlreadyApplied(msgspec.Struct, frozen=True):
    """A receipt: the plan's idempotency key was applied before; ``run_id`` is that run."""

    run_id: str | None = None


class TerminalReceipt(msgspec.Struct, frozen=True):
    """A receipt: the plan's run already reached a terminal state; ``run_id`` names it.

    The contract calls this receipt ``Terminal``; the name belongs to the run-ownership outcome
    :class:`trio_triggers.Terminal` in this package, so the receipt is ``TerminalReceipt`` at its
    source and everywhere else.
    """

    run_id: str


class Conflict(msgspec.Struct, frozen=True):
    """A receipt: the control plane refused the plan; ``message`` says why (code ``runner``)."""

    message: str


class Parked(msgspec.Struct, frozen=True):
    """A receipt: the plan awaits approval; the adapter offers it again after a backoff."""


Receipt = Accepted | AlreadyApplied | TerminalReceipt | Conflict | Parked


@runtime_checkable
class ControlPlane(Protocol):
    """An approval-gated control plane (it has no approval method on purpose)."""

    async def plan(self, request: StartRequest) -> Plan: ...

    async def run(self, request: PlanRun) -> Receipt: ...

    async def list_runs(self, *, run_id: str, limit: int) -> Sequence[RunInfo]: ...

    async def cancel(self, request: CancelRequest) -> Receipt: ...


_STOPPED: dict[str, RunState] = {
    "cancelled": "cancelled",
    "completed": "completed",
    "failed": "failed",
}


@final
class ControlRunner:
    """Implements :class:`~trio_triggers.Runner` over a :class:`ControlPlane`."""

    def __init__(self, control: ControlPlane) -> None:
        self._control = control

    @property
    def control(self) -> ControlPlane:
        return self._control

    async def start(self, request: StartRequest) -> str:
        try:
            return await self._start(request)
        except TriggerError:
            raise
        except Exception as exc:
            raise TriggerError("runner", "Control could not launch the scheduled run") from exc

    async def _start(self, request: StartRequest) -> str:
        plan = await self._control.plan(request)
        offer = PlanRun(plan.plan_id, plan.digest, plan.envelope, request.idempotency_key)
        for attempt in range(1, PARKED_ATTEMPTS + 1):
            receipt = await self._control.run(offer)
            if isinstance(receipt, Accepted | AlreadyApplied):
                if receipt.run_id is None:
                    name = type(receipt).__name__
                    raise TriggerError("runner", f"Control {name} receipt did not include a run id")
                return receipt.run_id
            if isinstance(receipt, TerminalReceipt):
                return receipt.run_id
            if isinstance(receipt, Conflict):
                raise TriggerError(
                    "runner", f"Control rejected the scheduled run: {receipt.message}"
                )
            if isinstance(receipt, Parked):
                if attempt == PARKED_ATTEMPTS:
                    raise TriggerError(
                        "runner",
                        f"Control plan {plan.plan_id} is still parked awaiting approval "
                        f"after {PARKED_ATTEMPTS} attempts",
                    )
                logger.info(
                    "A scheduled plan is parked awaiting approval, attempt %s",
                    attempt,
                    extra={"plan_id": plan.plan_id, "attempt": str(attempt)},
                )
                await trio.sleep(2 ** (attempt - 1))
                continue
            raise TriggerError("runner", "Control could not launch the scheduled run")
        raise AssertionError("unreachable")  # pragma: no cover

    async def inspect(self, run_id: str) -> RunState:
        try:
            items = await self._control.list_runs(run_id=run_id, limit=1)
            for item in items:
                if item.run_id == run_id:
                    return _STOPPED.get(item.status, "active")
            return "missing"
        except TriggerError:
            raise
        except Exception as exc:
            raise TriggerError("runner", f"Control could not inspect run {run_id}") from exc

    async def cancel(self, run_id: str) -> None:
        try:
            receipt = await self._control.cancel(CancelRequest(run_id, CANCEL_KEY_PREFIX + run_id))
        except TriggerError:
            raise
        except Exception as exc:
            raise TriggerError("runner", f"Control could not cancel run {run_id}") from exc
        if isinstance(receipt, Accepted | AlreadyApplied | TerminalReceipt):
            return
        if isinstance(receipt, Conflict):
            raise TriggerError(
                "runner", f"Control refused scheduled cancellation: {receipt.message}"
            )
        if isinstance(receipt, Parked):
            raise TriggerError(
                "runner", f"Control returned a Parked receipt for cancellation of run {run_id}"
            )
        raise TriggerError("runner", f"Control could not cancel run {run_id}")

    def __repr__(self) -> str:
        return f"ControlRunner({self._control!r})"
