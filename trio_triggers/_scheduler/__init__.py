"""Runners and the scheduler (``triggers.md`` §11-§14).

* :mod:`._runner`: the ``Runner`` protocol, ``StartRequest``, ``NoopRunner``;
* :mod:`._control`: ``ControlPlane`` and ``ControlRunner``;
* :mod:`._options`: ``SchedulerOptions`` and their validation;
* :mod:`._core`: ``open_scheduler``, the tick, the launch task and its monitor;
* :mod:`._readers`: ``summaries``, ``fires`` and ``TriggerSummary``;
* :mod:`trio_triggers._wake`: the registration notifier that wakes a sleeping ``serve`` loop.
"""

from __future__ import annotations

from .._wake import notify_registered
from ._control import (
    PARKED_ATTEMPTS,
    Accepted,
    AlreadyApplied,
    CancelRequest,
    Conflict,
    ControlPlane,
    ControlRunner,
    Parked,
    Plan,
    PlanRun,
    Receipt,
    RunInfo,
    TerminalReceipt,
)
from ._core import Fired, Owned, Scheduler, end_result, open_scheduler
from ._options import SchedulerOptions
from ._readers import TriggerSummary, fires, next_occurrences, summaries
from ._runner import NoopRunner, RunEndSignal, Runner, RunState, StartRequest

__all__ = [
    "PARKED_ATTEMPTS",
    "Accepted",
    "AlreadyApplied",
    "CancelRequest",
    "Conflict",
    "ControlPlane",
    "ControlRunner",
    "Fired",
    "NoopRunner",
    "Owned",
    "Parked",
    "Plan",
    "PlanRun",
    "Receipt",
    "RunEndSignal",
    "RunInfo",
    "RunState",
    "Runner",
    "Scheduler",
    "SchedulerOptions",
    "StartRequest",
    "TerminalReceipt",
    "TriggerSummary",
    "end_result",
    "fires",
    "next_occurrences",
    "notify_registered",
    "open_scheduler",
    "summaries",
]
