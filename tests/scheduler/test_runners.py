"""The runner protocol, ``NoopRunner`` and ``ControlRunner`` (``triggers.md`` §11, §13)."""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING

import pytest
import trio

from trio_triggers._errors import TriggerError
from trio_triggers._scheduler import (
    PARKED_ATTEMPTS,
    Accepted,
    AlreadyApplied,
    CancelRequest,
    Conflict,
    ControlRunner,
    NoopRunner,
    Parked,
    Plan,
    PlanRun,
    Receipt,
    RunInfo,
    Runner,
    StartRequest,
    TerminalReceipt,
)

if TYPE_CHECKING:
    from collections.abc import Sequence

REQUEST = StartRequest("flow", {"a": 1}, "hourly:1970-01-01T01:00:00.000Z")
ENVELOPE = {"steps": ["x"]}


class FakeControl:
    """A scripted control plane recording every call."""

    def __init__(
        self,
        receipts: Sequence[object] = (),
        runs: Sequence[RunInfo] = (),
        cancel_receipt: object = None,
        crash: str | None = None,
    ) -> None:
        self.receipts = list(receipts)
        self.runs = list(runs)
        self.cancel_receipt = cancel_receipt if cancel_receipt is not None else Accepted()
        self.crash = crash
        self.calls: list[tuple[str, object]] = []

    async def plan(self, request: StartRequest) -> Plan:
        self.calls.append(("plan", request))
        if self.crash == "plan":
            raise ValueError("plan crashed")
        return Plan("plan-1", "digest", ENVELOPE)

    async def run(self, request: PlanRun) -> Receipt:
        self.calls.append(("run", request))
        receipt = self.receipts.pop(0) if len(self.receipts) > 1 else self.receipts[0]
        return receipt  # type: ignore[return-value]

    async def list_runs(self, *, run_id: str, limit: int) -> Sequence[RunInfo]:
        self.calls.append(("list_runs", {"run_id": run_id, "limit": limit}))
        if self.crash == "list_runs":
            raise ValueError("list crashed")
        return self.runs

    async def cancel(self, request: CancelRequest) -> Receipt:
        self.calls.append(("cancel", request))
        if self.crash == "cancel":
            raise ValueError("cancel crashed")
        return self.cancel_receipt  # type: ignore[return-value]

    def names(self) -> list[str]:
        return [name for name, _ in self.calls]


async def test_noop_runner_defaults_and_overrides() -> None:
    runner = NoopRunner()
    assert isinstance(runner, Runner)
    assert await runner.start(REQUEST) == REQUEST.idempotency_key
    assert await runner.inspect("x") == "completed"
    await runner.cancel("x")

    cancelled: list[str] = []

    async def start(request: StartRequest) -> str:
        return "run-" + request.flow_id

    async def inspect(run_id: str) -> str:
        return "failed"

    async def cancel(run_id: str) -> None:
        cancelled.append(run_id)

    custom = NoopRunner(start=start, inspect=inspect, cancel=cancel)  # type: ignore[arg-type]
    assert await custom.start(REQUEST) == "run-flow"
    assert await custom.inspect("r") == "failed"
    await custom.cancel("r")
    assert cancelled == ["r"]


def test_start_request_positional_and_keyword() -> None:
    assert StartRequest("f", None, "k") == StartRequest(
        flow_id="f", input=None, idempotency_key="k"
    )


async def test_parked_once_then_accepted(autojump_clock: trio.testing.MockClock) -> None:
    control = FakeControl([Parked(), Accepted("run-1")])
    started = trio.current_time()
    assert await ControlRunner(control).start(REQUEST) == "run-1"
    assert trio.current_time() - started == pytest.approx(1.0)
    assert control.names() == ["plan", "run", "run"]
    assert control.calls[0][1] is REQUEST
    offer = PlanRun("plan-1", "digest", ENVELOPE, REQUEST.idempotency_key)
    assert control.calls[1][1] == offer
    assert control.calls[2][1] == offer


async def test_always_parked_gives_up_after_eight_attempts(
    autojump_clock: trio.testing.MockClock, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO, logger="trio_triggers")
    control = FakeControl([Parked()])
    started = trio.current_time()
    with trio.move_on_after(600):
        with pytest.raises(TriggerError) as info:
            await ControlRunner(control).start(REQUEST)
    assert info.value.code == "runner"
    assert "still parked awaiting approval" in info.value.message
    assert info.value.message == (
        "Control plan plan-1 is still parked awaiting approval after 8 attempts"
    )
    assert control.names().count("run") == PARKED_ATTEMPTS == 8
    assert control.names().count("plan") == 1
    assert trio.current_time() - started == pytest.approx(127.0)
    parked = [r for r in caplog.records if r.getMessage().startswith("A scheduled plan is parked")]
    assert [r.getMessage() for r in parked] == [
        f"A scheduled plan is parked awaiting approval, attempt {n}" for n in range(1, 8)
    ]
    assert all(r.levelno == logging.INFO for r in parked)
    assert parked[0].plan_id == "plan-1"  # type: ignore[attr-defined]
    assert parked[0].attempt == "1"  # type: ignore[attr-defined]


@pytest.mark.parametrize(
    ("receipt", "run_id"),
    [
        (Accepted("run-1"), "run-1"),
        (AlreadyApplied("run-2"), "run-2"),
        (TerminalReceipt("run-3"), "run-3"),
    ],
)
async def test_receipts_answer_run_ids(receipt: object, run_id: str) -> None:
    assert await ControlRunner(FakeControl([receipt])).start(REQUEST) == run_id


@pytest.mark.parametrize(
    ("receipt", "message"),
    [
        (Accepted(), "Control Accepted receipt did not include a run id"),
        (AlreadyApplied(), "Control AlreadyApplied receipt did not include a run id"),
        (Conflict("stale plan"), "Control rejected the scheduled run: stale plan"),
        ("something else", "Control could not launch the scheduled run"),
    ],
)
async def test_refusing_receipts(receipt: object, message: str) -> None:
    with pytest.raises(TriggerError) as info:
        await ControlRunner(FakeControl([receipt])).start(REQUEST)
    assert (info.value.code, info.value.message) == ("runner", message)


async def test_inspect_maps_statuses() -> None:
    for status, state in [
        ("accepted", "active"),
        ("running", "active"),
        ("parked", "active"),
        ("waiting-approval", "active"),
        ("brand-new", "active"),
        ("cancelled", "cancelled"),
        ("completed", "completed"),
        ("failed", "failed"),
    ]:
        control = FakeControl(runs=[RunInfo("run-7", status)])
        assert await ControlRunner(control).inspect("run-7") == state
        assert control.calls == [("list_runs", {"run_id": "run-7", "limit": 1})]
    assert await ControlRunner(FakeControl(runs=[])).inspect("run-7") == "missing"
    other = FakeControl(runs=[RunInfo("run-8", "running")])
    assert await ControlRunner(other).inspect("run-7") == "missing"


async def test_cancel_sends_keyed_request_and_maps_receipts() -> None:
    control = FakeControl()
    await ControlRunner(control).cancel("run-1")
    assert control.calls == [("cancel", CancelRequest("run-1", "trigger-cancel:run-1"))]
    for ok in (AlreadyApplied(), TerminalReceipt("run-1")):
        await ControlRunner(FakeControl(cancel_receipt=ok)).cancel("run-1")
    for receipt, message in [
        (Conflict("busy"), "Control refused scheduled cancellation: busy"),
        (Parked(), "Control returned a Parked receipt for cancellation of run run-1"),
        ("odd", "Control could not cancel run run-1"),
    ]:
        with pytest.raises(TriggerError) as info:
            await ControlRunner(FakeControl(cancel_receipt=receipt)).cancel("run-1")
        assert (info.value.code, info.value.message) == ("runner", message)


async def test_crashing_control_plane_calls_become_runner_errors() -> None:
    with pytest.raises(TriggerError) as start_info:
        await ControlRunner(FakeControl(crash="plan")).start(REQUEST)
    assert start_info.value.message == "Control could not launch the scheduled run"
    assert isinstance(start_info.value.__cause__, ValueError)
    with pytest.raises(TriggerError) as inspect_info:
        await ControlRunner(FakeControl(crash="list_runs")).inspect("run-1")
    assert inspect_info.value.message == "Control could not inspect run run-1"
    with pytest.raises(TriggerError) as cancel_info:
        await ControlRunner(FakeControl(crash="cancel")).cancel("run-1")
    assert cancel_info.value.message == "Control could not cancel run run-1"


async def test_trigger_errors_pass_through_unchanged() -> None:
    original = TriggerError("runner_timeout", "mine")

    class Raising(FakeControl):
        async def plan(self, request: StartRequest) -> Plan:
            raise original

        async def list_runs(self, *, run_id: str, limit: int) -> Sequence[RunInfo]:
            raise original

        async def cancel(self, request: CancelRequest) -> Receipt:
            raise original

    runner = ControlRunner(Raising())
    for call in (
        lambda: runner.start(REQUEST),
        lambda: runner.inspect("r"),
        lambda: runner.cancel("r"),
    ):
        with pytest.raises(TriggerError) as info:
            await call()
        assert info.value is original
