"""A scripted runner: runs that take a chosen time, fail, get cancelled, vanish or never answer.

The runner keeps its runs in memory but deduplicates starts by idempotency key the way a durable
runner must (``triggers.md`` §11.1): a second ``start`` with a key it has seen answers the run it
already created.  Every call is still recorded, so duplicate launches stay visible in
``starts`` and ``duplicate_starts``.

Run time is Trio time (``trio.current_time()``), never the wall clock, so a wall-clock jump in a
simulation does not make a run finish early.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any, Literal, Protocol, final

import msgspec
import trio

from .._errors import TriggerError

__all__ = ["RunPlan", "RunState", "ScriptedRunner", "StartRequestLike"]

RunState = Literal["active", "completed", "failed", "cancelled", "missing"]
EndState = Literal["completed", "failed", "cancelled", "missing"]
StartMode = Literal["ok", "refuse", "hang", "late", "hang_after_create"]


class StartRequestLike(Protocol):
    """What the runner reads from a ``StartRequest``."""

    @property
    def flow_id(self) -> str: ...

    @property
    def input(self) -> Any: ...

    @property
    def idempotency_key(self) -> str: ...


class RunPlan(msgspec.Struct, frozen=True, kw_only=True):
    """How one start call and the run it creates behave.

    * ``start``: ``"ok"`` answers at once; ``"refuse"`` raises ``start_error`` (default
      ``TriggerError("runner", ...)``) before creating anything; ``"hang"`` never answers and
      creates nothing; ``"hang_after_create"`` creates the run and then never answers;
      ``"late"`` creates the run and answers after ``start_delay`` seconds.
    * ``duration``: seconds (Trio time) the run stays active after it is created; ``None`` means
      until :meth:`ScriptedRunner.finish` or a cancel.
    * ``outcome``: the state the run reports once it has stopped (``"missing"``: it vanishes).
    """

    start: StartMode = "ok"
    start_delay: float = 0.0
    start_error: TriggerError | None = None
    duration: float | None = 0.0
    outcome: EndState = "completed"


class _Run(msgspec.Struct, kw_only=True):
    run_id: str
    key: str
    created_at: float
    duration: float | None
    outcome: EndState
    cancelled: bool = False
    finished: EndState | None = None
    finished_time: float | None = None


PlanFn = Callable[[StartRequestLike, int], RunPlan]
CallHook = Callable[[str, str], RunPlan | None]


@final
class ScriptedRunner:
    """A :class:`~trio_triggers.Runner` whose every run is scripted.

    With no script it behaves like the fixture of ``triggers.md`` §18.1: ``start`` appends the
    request to :attr:`starts`, answers ``run-<len(starts)>`` for a new key and marks the run
    active in :attr:`active`; ``inspect(r)`` appends to :attr:`inspected` and answers
    ``"active"`` while ``r`` is in :attr:`active`, else the state set with :meth:`set_state`
    (default ``default_state``); ``cancel(r)`` appends to :attr:`cancelled` and removes ``r``
    from :attr:`active`.  ``fail_starts=k`` makes the first ``k`` starts raise ``fail_with``
    (they still count in :attr:`starts`).

    ``plan(request, attempt)`` (attempt = how many starts this key has had before) scripts a
    start and the run it creates; ``inspect_fault(run_id)`` / ``cancel_fault(run_id)`` may answer
    ``"fail"``, ``"hang"`` or ``None`` to script those calls.
    """

    def __init__(
        self,
        *,
        plan: PlanFn | None = None,
        default_state: RunState = "completed",
        fail_starts: int = 0,
        fail_with: TriggerError | None = None,
        inspect_fault: Callable[[str], Literal["fail", "hang"] | None] | None = None,
        cancel_fault: Callable[[str], Literal["fail", "hang"] | None] | None = None,
    ) -> None:
        self._plan = plan
        self.default_state: RunState = default_state
        self._fail_starts = fail_starts
        self._fail_with = fail_with
        self._inspect_fault = inspect_fault
        self._cancel_fault = cancel_fault
        self.starts: list[StartRequestLike] = []
        self.inspected: list[str] = []
        self.cancelled: list[str] = []
        self.active: set[str] = set()
        self.duplicate_starts: int = 0
        self._states: dict[str, RunState] = {}
        self._runs: dict[str, _Run] = {}
        self._by_key: dict[str, str] = {}
        self._attempts: dict[str, int] = {}

    # -- scripting ------------------------------------------------------------------------
    def set_state(self, run_id: str, state: RunState) -> None:
        """Make ``inspect(run_id)`` answer ``state`` (``"active"`` adds it to :attr:`active`)."""
        if state == "active":
            self.active.add(run_id)
        else:
            self.active.discard(run_id)
        self._states[run_id] = state

    def finish(self, run_id: str, state: EndState = "completed") -> None:
        """Stop a run now with ``state``."""
        run = self._runs.get(run_id)
        if run is not None and run.finished is None:
            run.finished = state
            run.finished_time = trio.current_time()
        self.set_state(run_id, state)

    def stop_all(self, state: EndState = "completed") -> None:
        """Stop every active run (``triggers.md`` §18: "mark every run stopped")."""
        for run_id in sorted(self.active):
            self.finish(run_id, state)

    def limit_remaining(self, seconds: float) -> None:
        """Make every unfinished run stop at most ``seconds`` from now (a quiet phase)."""
        now = trio.current_time()
        for run in self._runs.values():
            self._refresh(run.run_id)
            if run.finished is not None:
                continue
            if run.duration is None or run.created_at + run.duration > now + seconds:
                run.duration = now + seconds - run.created_at

    def run_for_key(self, key: str) -> str | None:
        """The run created for an idempotency key, if any (the durable deduplication table)."""
        return self._by_key.get(key)

    def state_of(self, run_id: str) -> RunState:
        """The run's state without recording an inspection."""
        self._refresh(run_id)
        if run_id in self.active:
            return "active"
        return self._states.get(run_id, self.default_state)

    def stopped_for(self, run_id: str) -> float | None:
        """Seconds since the run stopped (``None`` while it is active or if never created)."""
        self._refresh(run_id)
        run = self._runs.get(run_id)
        if run is None or run.finished_time is None:
            return None
        return trio.current_time() - run.finished_time

    @property
    def runs(self) -> dict[str, str]:
        """Idempotency key -> run id for every run created, in creation order."""
        return dict(self._by_key)

    # -- the Runner protocol ----------------------------------------------------------------
    async def start(self, request: StartRequestLike) -> str:
        await trio.lowlevel.checkpoint()
        self.starts.append(request)
        key = request.idempotency_key
        attempt = self._attempts.get(key, 0)
        self._attempts[key] = attempt + 1
        existing = self._by_key.get(key)
        if existing is not None:
            # Durable deduplication comes first: a repeated start answers the same run.
            self.duplicate_starts += 1
            return existing
        if self._fail_starts > 0:
            self._fail_starts -= 1
            raise self._fail_with or TriggerError("runner", f"start of {key} refused")
        plan = self._plan(request, attempt) if self._plan is not None else RunPlan(duration=None)
        if plan.start == "refuse":
            raise plan.start_error or TriggerError("runner", f"start of {key} refused")
        if plan.start == "hang":
            await trio.sleep_forever()
        run_id = f"run-{len(self.starts)}"
        self._create(run_id, key, plan)
        if plan.start == "hang_after_create":
            await trio.sleep_forever()
        if plan.start == "late":
            await trio.sleep(plan.start_delay)
        return run_id

    async def inspect(self, run_id: str) -> RunState:
        await trio.lowlevel.checkpoint()
        self.inspected.append(run_id)
        fault = self._inspect_fault(run_id) if self._inspect_fault is not None else None
        if fault == "hang":
            await trio.sleep_forever()
        if fault == "fail":
            raise TriggerError("runner", f"inspection of {run_id} failed")
        return self.state_of(run_id)

    async def cancel(self, run_id: str) -> None:
        await trio.lowlevel.checkpoint()
        self.cancelled.append(run_id)
        fault = self._cancel_fault(run_id) if self._cancel_fault is not None else None
        if fault == "hang":
            await trio.sleep_forever()
        if fault == "fail":
            raise TriggerError("runner", f"cancel of {run_id} failed")
        run = self._runs.get(run_id)
        if run is not None:
            self._refresh(run_id)
            if run.finished is None:
                run.cancelled = True
                run.finished = "cancelled"
                run.finished_time = trio.current_time()
                self.set_state(run_id, "cancelled")
            return
        if run_id in self.active:
            self.set_state(run_id, "cancelled")

    # -- internals --------------------------------------------------------------------------
    def _create(self, run_id: str, key: str, plan: RunPlan) -> None:
        self._by_key[key] = run_id
        self._runs[run_id] = _Run(
            run_id=run_id,
            key=key,
            created_at=trio.current_time(),
            duration=plan.duration,
            outcome=plan.outcome,
        )
        self.active.add(run_id)

    def _refresh(self, run_id: str) -> None:
        run = self._runs.get(run_id)
        if run is None or run.finished is not None or run.duration is None:
            return
        if trio.current_time() >= run.created_at + run.duration and not math.isinf(run.duration):
            run.finished = run.outcome
            run.finished_time = run.created_at + run.duration
            self.set_state(run_id, run.outcome)
