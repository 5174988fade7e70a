"""Every checker catches the violation it exists for (synthetic transitions and calls)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import pytest
import trio

from trio_triggers import (
    Claim,
    Held,
    ManualFire,
    ManualRequest,
    OwnerId,
    PendingClaim,
    RegisteredTrigger,
    Result,
    Trigger,
    TriggerError,
)
from trio_triggers._ownership._models import (
    Activated,
    Claimed,
    ClaimLost,
    Created,
    RunRow,
    Transitioned,
    Updated,
)
from trio_triggers.testing._faults import StoreCall
from trio_triggers.testing._invariants import (
    Grants,
    LedgerRow,
    StoreState,
    TriggerRow,
    check_transition,
)
from trio_triggers.testing._run_checks import RunGrants, check_run_transition
from trio_triggers.testing._simulate import SimConfig, SimReport, _CallerState, _World
from trio_triggers.testing.pytest_plugin import (  # the fixtures, as a plugin user gets them
    quiet_trigger_logs,  # noqa: F401
    simulate_seed,  # noqa: F401
)

if TYPE_CHECKING:
    from collections.abc import Callable

    import trio.testing

NOW = 10_000_000
R5 = "trigger-reservation:t:aaaa:5"
R6 = "trigger-reservation:t:bbbb:6"


def trig(**changes: Any) -> TriggerRow:
    fields: dict[str, Any] = {
        "trigger_id": "t",
        "revision": 1,
        "enabled": True,
        "overlap": "skip",
        "last_fired_at": None,
        "pending_at": None,
        "active_run_id": None,
        "active_claimed_at": None,
    }
    fields.update(changes)
    return TriggerRow(**fields)


def row(occ: int, outcome: str | None, run_id: str | None = None) -> LedgerRow:
    return LedgerRow(trigger_id="t", occurrence=occ, outcome=outcome, run_id=run_id)


def st(t: TriggerRow | None, *rows: LedgerRow) -> StoreState:
    return StoreState(
        triggers={} if t is None else {"t": t},
        ledger={(r.trigger_id, r.occurrence): r for r in rows},
        claimed_at_known=True,
    )


def found(
    method: str,
    args: tuple[Any, ...],
    pre: StoreState,
    post: StoreState,
    *,
    answer: Any = None,
    error: BaseException | None = None,
    kwargs: dict[str, Any] | None = None,
    grants: Grants | None = None,
) -> set[str]:
    out = check_transition(
        method=method,
        args=args,
        kwargs=kwargs or {},
        answer=answer,
        error=error,
        pre=pre,
        post=post,
        now=NOW,
        grants=grants or Grants(),
    )
    return {v.invariant for v in out}


def launched(occ: int, run: str, reservation: str | None) -> Result:
    return Result(
        trigger_id="t", occurrence=occ, outcome="launched", run_id=run, reservation_id=reservation
    )


def test_a_correct_launch_passes() -> None:
    grants = Grants()
    pre = st(trig(), *())
    claim = Claim(claimed=True, action="fire", reservation_id=R5)
    mid = st(trig(active_run_id=R5, active_claimed_at=NOW), row(5, None))
    kwargs = {"expected_revision": 1}
    assert (
        found("claim_fire", ("t", 5), pre, mid, answer=claim, kwargs=kwargs, grants=grants) == set()
    )
    post = st(trig(active_run_id="run-1", last_fired_at=5), row(5, "launched", "run-1"))
    assert found("record_result", (launched(5, "run-1", R5),), mid, post, grants=grants) == set()


CASES: list[tuple[str, str, tuple[Any, ...], StoreState, StoreState, dict[str, Any]]] = [
    (
        "T1",
        "record_result",
        (Result(trigger_id="t", occurrence=1, outcome="completed"),),
        st(trig(last_fired_at=10)),
        st(trig(last_fired_at=5)),
        {},
    ),
    (
        "T2",
        "record_result",
        (launched(20, "run-1", R5),),
        st(trig(last_fired_at=10, active_run_id=R5), row(20, None)),
        st(trig(last_fired_at=10, active_run_id="run-1"), row(20, "launched", "run-1")),
        {},
    ),
    (
        "T3",
        "record_result",
        (Result(trigger_id="t", occurrence=5, outcome="failed"),),
        st(trig(last_fired_at=5), row(5, "completed", "run-1")),
        st(trig(last_fired_at=5), row(5, "failed", "run-1")),
        {},
    ),
    (
        "T4",
        "record_result",
        (launched(5, R6, R5),),
        st(trig(active_run_id=R5), row(5, None)),
        st(trig(active_run_id=R6, last_fired_at=5), row(5, "launched", R6)),
        {},
    ),
    (
        "T5",
        "record_result",
        (launched(5, "run-1", R5),),
        st(trig(active_run_id=R6), row(5, None)),
        st(trig(active_run_id="run-1", last_fired_at=5), row(5, "launched", "run-1")),
        {},
    ),
    ("T6", "set_pending", ("t", 5), st(trig()), st(trig(active_run_id=R5, pending_at=5)), {}),
    (
        "T8",
        "record_result",
        (Result(trigger_id="t", occurrence=5, outcome="completed"),),
        st(trig(last_fired_at=1), row(5, None)),
        st(trig(last_fired_at=5), row(5, None)),
        {"error": TriggerError("stale_owner", "no")},
    ),
    ("T8", "inspect", ("t",), st(trig()), st(trig(pending_at=3)), {"answer": Held()}),
    (
        "T9",
        "record_result",
        (launched(5, "run-1", R5),),
        st(trig(active_run_id=R5, active_claimed_at=NOW), row(5, None)),
        st(
            trig(active_run_id="run-1", active_claimed_at=NOW, last_fired_at=5),
            row(5, "launched", "run-1"),
        ),
        {},
    ),
    (
        "T10",
        "active_run",
        ("t",),
        st(trig(active_run_id=R5, active_claimed_at=NOW - 1), row(5, None)),
        st(trig(pending_at=5), row(5, None)),
        {"answer": None},
    ),
    ("T10", "active_run", ("t",), st(trig(active_run_id="run-1")), st(trig()), {"answer": None}),
    ("T11", "set_pending", ("t", 20), st(trig(pending_at=30)), st(trig(pending_at=20)), {}),
    ("T11", "restore_pending", ("t", 5, R5), st(trig(pending_at=30)), st(trig()), {}),
    (
        "T12",
        "clear_active",
        ("t", R5),
        st(trig(active_run_id=R5), row(5, None)),
        st(trig(), row(5, None)),
        {},
    ),
    (
        "T13",
        "prune_fires",
        (100,),
        st(trig(last_fired_at=5), row(5, "launched", "run-1")),
        st(trig(last_fired_at=5)),
        {"answer": 1},
    ),
    (
        "T13",
        "prune_fires",
        (100,),
        st(trig(last_fired_at=5, pending_at=5), row(5, "skipped")),
        st(trig(last_fired_at=5, pending_at=5)),
        {"answer": 1},
    ),
]


@pytest.mark.parametrize(("invariant", "method", "args", "pre", "post", "extra"), CASES)
def test_step_checker_catches(
    invariant: str,
    method: str,
    args: tuple[Any, ...],
    pre: StoreState,
    post: StoreState,
    extra: dict[str, Any],
) -> None:
    assert invariant in found(method, args, pre, post, **extra)


def test_fence_checker_catches_a_stale_grant() -> None:
    pre = st(trig(revision=2))
    post = st(trig(revision=2, active_run_id=R5, active_claimed_at=NOW), row(5, None))
    claim = Claim(claimed=True, action="fire", reservation_id=R5)
    bad = found("claim_fire", ("t", 5), pre, post, answer=claim, kwargs={"expected_revision": 1})
    assert "T7" in bad
    disabled = st(trig(enabled=False))
    assert "T7" in found(
        "claim_fire",
        ("t", 5),
        disabled,
        disabled,
        answer=Claim(claimed=False),
        kwargs={"expected_revision": 1},
    )
    refused = TriggerError("trigger_disabled", "x")
    assert (
        found(
            "claim_fire",
            ("t", 5),
            disabled,
            disabled,
            error=refused,
            kwargs={"expected_revision": 1},
        )
        == set()
    )


def test_fire_while_held_and_duplicate_reservations_are_caught() -> None:
    grants = Grants()
    grants.reservations[R5] = NOW - 10  # live
    pre = st(trig(active_run_id=R5), row(5, None))
    post = st(trig(active_run_id=R6, pending_at=5), row(5, None), row(6, None))
    claim = Claim(claimed=True, action="fire", reservation_id=R6)
    kwargs = {"expected_revision": 1}
    got = found("claim_fire", ("t", 6), pre, post, answer=claim, kwargs=kwargs, grants=grants)
    assert {"T6", "T10"} <= got
    grants2 = Grants()
    grants2.reservations[R6] = 1
    empty = st(trig())
    post2 = st(trig(active_run_id=R6, active_claimed_at=NOW), row(6, None))
    got2 = found("claim_fire", ("t", 6), empty, post2, answer=claim, kwargs=kwargs, grants=grants2)
    assert "T15" in got2
    supersede = Claim(claimed=True, action="supersede", reservation_id=R6, active_run_id=None)
    got3 = found("claim_fire", ("t", 6), empty, post2, answer=supersede, kwargs=kwargs)
    assert "T6" in got3  # supersede under "skip", and without naming what it displaced


def test_pending_claim_may_clear_its_own_slot() -> None:
    pre = st(trig(pending_at=5, last_fired_at=5), row(5, "buffered"))
    post = st(
        trig(pending_at=None, last_fired_at=5, active_run_id=R5, active_claimed_at=NOW),
        row(5, "buffered"),
    )
    answer = PendingClaim(occurrence=5, claim=Claim(claimed=True, action="fire", reservation_id=R5))
    assert (
        found("claim_pending", ("t",), pre, post, answer=answer, kwargs={"expected_revision": 1})
        == set()
    )


# --------------------------------------------------------------------------- run rows

A = OwnerId(host_id="host-a", pid=1, nonce="a")
B = OwnerId(host_id="host-b", pid=2, nonce="b")


def run(**changes: Any) -> RunRow:
    fields: dict[str, Any] = {
        "run_id": "r",
        "status": "pending",
        "created_at_ms": 0,
        "state_json": "{}",
    }
    fields.update(changes)
    return RunRow(**fields)


RUNNING_A = run(status="running", owner=A, heartbeat_at_ms=1000, started_at_ms=0)
RUN_CASES: list[tuple[str, str, tuple[Any, ...], Any, RunRow | None, RunRow | None, Any]] = [
    (
        "O2",
        "claim_and_own",
        ("r", run(), A, 0),
        Activated(),
        run(),
        run(status="running", owner=A, heartbeat_at_ms=None, started_at_ms=0),
        None,
    ),
    (
        "O3",
        "transition_owned",
        ("r", A, "running"),
        Transitioned(),
        run(status="completed", finished_at_ms=5, started_at_ms=0),
        RUNNING_A,
        None,
    ),
    ("O3", "create", ("r", "{}"), None, None, run(status="suspended", started_at_ms=0), None),
    (
        "O4",
        "heartbeat",
        ("r", A, 2000),
        Updated(),
        RUNNING_A,
        run(status="running", owner=B, heartbeat_at_ms=2000, started_at_ms=0),
        None,
    ),
    (
        "O6",
        "activate",
        ("r", B, 5, RUNNING_A),
        ClaimLost(),
        run(status="pending", claim=A, claimed_at_ms=5),
        run(status="pending"),
        None,
    ),
    (
        "O7",
        "heartbeat",
        ("r", A, 2000),
        Updated(),
        RUNNING_A,
        run(status="running", owner=A, heartbeat_at_ms=2000, started_at_ms=7),
        None,
    ),
    (
        "O9",
        "heartbeat",
        ("r", A, 500),
        Updated(),
        RUNNING_A,
        run(status="running", owner=A, heartbeat_at_ms=500, started_at_ms=0),
        None,
    ),
    (
        "O10",
        "claim_and_own",
        ("r", RUNNING_A, B, 31_000),
        Activated(),
        RUNNING_A,
        run(status="running", owner=B, heartbeat_at_ms=31_000, started_at_ms=0),
        None,
    ),
    (
        "O16",
        "reconfirm",
        ("r", A, 2000),
        Updated(),
        run(
            status="running",
            owner=A,
            heartbeat_at_ms=1000,
            started_at_ms=0,
            claim=B,
            claimed_at_ms=9,
        ),
        run(
            status="running",
            owner=A,
            heartbeat_at_ms=2000,
            started_at_ms=0,
            claim=B,
            claimed_at_ms=9,
        ),
        None,
    ),
    (
        "O17",
        "transition_owned",
        ("r", B, "completed"),
        Transitioned(),
        RUNNING_A,
        run(status="completed", finished_at_ms=9, started_at_ms=0),
        None,
    ),
    (
        "O26",
        "heartbeat",
        ("r", A, 2000),
        Updated(),
        run(status="running", owner=A, heartbeat_at_ms=1000, started_at_ms=0, flow_id="f"),
        run(status="running", owner=A, heartbeat_at_ms=2000, started_at_ms=0, flow_id="g"),
        None,
    ),
    (
        "O26",
        "transition_owned",
        ("r", A, "failed"),
        Transitioned(),
        RUNNING_A,
        run(status="failed", finished_at_ms=9, started_at_ms=0, result_json="{}"),
        None,
    ),
    (
        "O27",
        "request_cancel",
        ("r", 9),
        None,
        run(cancel_requested_at_ms=5),
        run(cancel_requested_at_ms=9),
        None,
    ),
    (
        "O28",
        "claim",
        ("r", run(), A, 0),
        None,
        run(),
        run(claim=A, claimed_at_ms=0),
        RuntimeError("x"),
    ),
]


@pytest.mark.parametrize(
    ("invariant", "method", "args", "answer", "pre", "post", "error"), RUN_CASES
)
def test_run_checker_catches(
    invariant: str,
    method: str,
    args: tuple[Any, ...],
    answer: Any,
    pre: RunRow | None,
    post: RunRow | None,
    error: BaseException | None,
) -> None:
    got = check_run_transition(
        method=method,
        args=args,
        answer=answer,
        error=error,
        pre=pre,
        post=post,
        grants=RunGrants(),
        now=0,
    )
    assert invariant in {v.invariant for v in got}


def test_run_checker_counts_activations_and_keys() -> None:
    grants = RunGrants()
    claimed = run(claim=B, claimed_at_ms=5)
    check_run_transition(
        method="claim",
        args=("r", run(), B, 5),
        answer=Claimed(claimed_at_ms=5),
        error=None,
        pre=run(),
        post=claimed,
        grants=grants,
        now=5,
    )
    active = run(status="running", owner=B, heartbeat_at_ms=5, started_at_ms=5)
    kwargs = {
        "method": "activate",
        "args": ("r", B, 5, run()),
        "answer": Activated(),
        "error": None,
        "pre": claimed,
        "post": active,
        "grants": grants,
        "now": 5,
    }
    assert check_run_transition(**kwargs) == []  # type: ignore[arg-type]
    assert {v.invariant for v in check_run_transition(**kwargs)} == {"O5"}  # type: ignore[arg-type]
    first = run(run_id="r1", idempotency_key="k")
    second = run(run_id="r2", idempotency_key="k")
    check_run_transition(
        method="create",
        args=("r1",),
        answer=Created(row=first),
        error=None,
        pre=None,
        post=first,
        grants=grants,
        now=0,
    )
    got = check_run_transition(
        method="create",
        args=("r2",),
        answer=Created(row=second),
        error=None,
        pre=None,
        post=second,
        grants=grants,
        now=0,
    )
    assert {v.invariant for v in got} == {"O25"}


# --------------------------------------------------------------------------- call checks


class FakeScheduler:
    def __init__(self) -> None:
        self.marks: dict[str, int] = {}

    def watermark(self, trigger_id: str) -> int | None:
        return self.marks.get(trigger_id)


async def make_world() -> tuple[_World, _CallerState]:
    world = _World(1, SimConfig())
    cs = _CallerState(None)
    world.callers["s"] = cs
    return world, cs


async def test_runner_call_checks(autojump_clock: trio.testing.MockClock) -> None:
    cases: list[tuple[str, Callable[[_World, _CallerState], None]]] = [
        ("T19", lambda w, cs: w.runner_call("s", "start", "t:1970-01-01T00:00:00.000Z")),
        ("T24", lambda w, cs: w.runner_call("s", "inspect", R5)),
        ("T22", lambda w, cs: w.runner_call("s", "cancel", "run-1")),
        ("T27", lambda w, cs: w.runner_done("s", "inspect", "run-1", -100.0, None, "active")),
    ]
    for invariant, act in cases:
        world, cs = await make_world()
        act(world, cs)
        assert world.violation is not None
        assert world.violation.invariant == invariant
    world, cs = await make_world()
    cs.closing = True
    cs.granted_keys.add("k")
    world.runner_call("s", "start", "k")
    assert world.violation is not None
    assert world.violation.invariant == "T23"


async def test_result_checks(autojump_clock: trio.testing.MockClock) -> None:
    world, cs = await make_world()
    world.check_result("s", cs, Result(trigger_id="t", occurrence=5, outcome="failed", run_id=R5))
    assert world.violation is not None
    assert world.violation.invariant == "T21"
    world, cs = await make_world()
    world.runner.set_state("run-1", "active")  # type: ignore[union-attr]
    world.check_result(
        "s", cs, Result(trigger_id="t", occurrence=5, outcome="completed", run_id="run-1")
    )
    assert world.violation is not None
    assert world.violation.invariant == "T29"
    world, cs = await make_world()
    world.check_result(
        "s", cs, Result(trigger_id="t", occurrence=5, outcome="superseded", run_id="run-1")
    )
    assert world.violation is not None
    assert world.violation.invariant == "T22"


async def test_watermark_and_claim_call_checks(autojump_clock: trio.testing.MockClock) -> None:
    from trio_triggers import RegisteredTrigger

    world, cs = await make_world()
    fake = FakeScheduler()
    cs.scheduler = fake  # type: ignore[assignment]
    fake.marks["t"] = 100
    call = StoreCall(seq=1, caller="s", method="get", args=("t",), kwargs={})
    await world.after(call)
    fake.marks["t"] = 50
    await world.after(call)
    assert world.violation is not None
    assert world.violation.invariant == "T17"

    decl = RegisteredTrigger(
        id="t",
        flow_id="f",
        input=None,
        cron="0 * * * *",
        timezone="UTC",
        revision=1,
        enabled=False,
    )
    for enabled, invariant in ((False, "T30"), (True, "T18")):
        world, cs = await make_world()
        world.declarations[("t", 1)] = msgspec_replace(decl, enabled=enabled)
        future = world.wall.now_ms() + 7_200_000
        future -= future % 3_600_000
        claim = StoreCall(
            seq=2,
            caller="s",
            method="claim_fire",
            args=("t", future),
            kwargs={"expected_revision": 1},
        )
        await world.before(claim)
        assert world.violation is not None
        assert world.violation.invariant == invariant


def msgspec_replace(obj: Any, **changes: Any) -> Any:
    import msgspec

    return msgspec.structs.replace(obj, **changes)


def test_plugin_fixture_reports_a_violation_as_a_failure(
    simulate_seed: Any,  # noqa: F811
) -> None:
    report: SimReport = simulate_seed(4, days=1)
    assert report.seed == 4
    with pytest.raises(pytest.fail.Exception, match=r"seed 0 broke T23"):
        # The bug's world as PLANTED_WORLDS has it (no backfills: see there).
        simulate_seed(
            0,
            days=3,
            crashes_per_day=8,
            backfills_per_day=0,
            planted_bugs=("cancel_runs_on_exit",),
        )


# --------------------------------------------------------------------------- manual fires

RM = "trigger-reservation:t:manual-cccc:5500"


def manual_row(occ: int, outcome: str | None, key: str, run_id: str | None = None) -> LedgerRow:
    return LedgerRow(trigger_id="t", occurrence=occ, outcome=outcome, run_id=run_id, manual_key=key)


def manual_answer(occ: int, key: str, claim: Claim, *, repeated: bool = False) -> ManualFire:
    trigger = RegisteredTrigger.of(
        Trigger.make({"id": "t", "flow_id": "f", "cron": "0 * * * *", "input": None}), revision=1
    )
    return ManualFire(
        trigger_id="t",
        occurrence=occ,
        request=ManualRequest(key=key),
        claim=claim,
        trigger=trigger,
        repeated=repeated,
    )


def test_a_correct_manual_fire_passes_and_leaves_the_cursor() -> None:
    grants = Grants()
    pre = st(trig(last_fired_at=5000))
    claim = Claim(claimed=True, action="fire", reservation_id=RM)
    mid = st(
        trig(last_fired_at=5000, active_run_id=RM, active_claimed_at=NOW),
        manual_row(5500, None, "k"),
    )
    answer = manual_answer(5500, "k", claim)
    assert found("claim_manual", ("t",), pre, mid, answer=answer, grants=grants) == set()
    post = st(
        trig(last_fired_at=5000, active_run_id="run-1"), manual_row(5500, "launched", "k", "run-1")
    )
    assert found("record_result", (launched(5500, "run-1", RM),), mid, post, grants=grants) == set()


def test_t37_a_manual_fire_that_moves_the_cursor_is_caught() -> None:
    mid = st(
        trig(last_fired_at=5000, active_run_id=RM, active_claimed_at=NOW),
        manual_row(5500, None, "k"),
    )
    moved = st(
        trig(last_fired_at=5500, active_run_id="run-1"), manual_row(5500, "launched", "k", "run-1")
    )
    grants = Grants()
    grants.reservations[RM] = NOW
    assert "T37" in found(
        "record_result", (launched(5500, "run-1", RM),), mid, moved, grants=grants
    )
    claim = Claim(claimed=True, action="skip")
    pre = st(trig(last_fired_at=5000, active_run_id="run-0"))
    skipped = st(trig(last_fired_at=5500, active_run_id="run-0"), manual_row(5500, "skipped", "k"))
    answer = manual_answer(5500, "k", claim)
    assert "T37" in found("claim_manual", ("t",), pre, skipped, answer=answer)


def test_t38_keys_rows_and_repeats_are_checked() -> None:
    claim = Claim(claimed=True, action="skip")
    pre = st(trig(active_run_id="run-0"))
    # a manual fire on a whole second: a boundary's row
    on_grid = st(trig(active_run_id="run-0"), manual_row(6000, "skipped", "k"))
    assert "T38" in found(
        "claim_manual", ("t",), pre, on_grid, answer=manual_answer(6000, "k", claim)
    )
    # one key, two fires
    grants = Grants()
    first = st(trig(active_run_id="run-0"), manual_row(5500, "skipped", "k"))
    assert (
        found(
            "claim_manual",
            ("t",),
            pre,
            first,
            answer=manual_answer(5500, "k", claim),
            grants=grants,
        )
        == set()
    )
    second = st(
        trig(active_run_id="run-0"),
        manual_row(5500, "skipped", "k"),
        manual_row(5600, "skipped", "k"),
    )
    assert "T38" in found(
        "claim_manual", ("t",), first, second, answer=manual_answer(5600, "k", claim), grants=grants
    )
    # a repeated key that writes
    repeated = manual_answer(5500, "k", Claim(claimed=False), repeated=True)
    assert "T38" in found("claim_manual", ("t",), first, second, answer=repeated)
    assert found("claim_manual", ("t",), first, first, answer=repeated) == set()
