"""The pure claim decision, lease and result refusal (§9.8.1, §10), row by row and against a
model (hypothesis)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import pytest
from hypothesis import given, settings, strategies as st

from trio_triggers import TriggerError
from trio_triggers._identities import reservation_occurrence
from trio_triggers._store import Claim, ClaimAction, Dropped, Result
from trio_triggers._store._decision import (
    AdvanceCursor,
    ClaimSnapshot,
    ClearPendingIf,
    CountMissed,
    FireState,
    LeaseExpired,
    LeaseHeld,
    LeaseIdle,
    ReleaseReservation,
    ReplaceHolder,
    Reserve,
    SetOutcome,
    SetPending,
    SetRunId,
    TriggerWrite,
    WriteFire,
    decide,
    dropped_applies,
    is_prunable,
    lease,
    plan_result,
    refuse_result,
    slot_displaced,
)

LEASE = 300_000
NEW = "trigger-reservation:daily:new:9"


def res(occurrence: int | str, attempt: str = "a") -> str:
    return f"trigger-reservation:daily:{attempt}:{occurrence}"


def snap(**changes: Any) -> ClaimSnapshot:
    base: dict[str, Any] = {
        "trigger_id": "daily",
        "occurrence": 9,
        "expected_revision": 1,
        "resume_buffered": False,
        "revision": 1,
        "enabled": True,
        "overlap": "skip",
        "active": None,
        "active_claimed_at": None,
        "pending": None,
        "existing_fire": None,
        "active_fire": None,
        "reservation_id": NEW,
        "claimed_at": 1_000_000,
    }
    base.update(changes)
    return ClaimSnapshot(**base)


# --- step 0: refusals --------------------------------------------------------------------


def test_revision_is_checked_before_enabled() -> None:
    with pytest.raises(TriggerError) as info:
        decide(snap(revision=2, enabled=False))
    assert info.value.code == "revision_mismatch"
    assert info.value.message == "trigger daily is at revision 2, not the claimed 1"
    with pytest.raises(TriggerError) as info:
        decide(snap(enabled=False))
    assert info.value.code == "trigger_disabled"


# --- step 1: expiry ----------------------------------------------------------------------


@pytest.mark.parametrize(
    ("claimed_at", "expired"),
    [(1_000_000 - LEASE, True), (1_000_000 - LEASE + 1, False), (None, True), (1_000_000, False)],
)
def test_reservation_expiry_boundary(claimed_at: int | None, expired: bool) -> None:
    decision = decide(snap(active=res(3), active_claimed_at=claimed_at))
    if expired:
        assert decision.claim.action == "fire"
        assert decision.writes[0] == ReleaseReservation(expected=res(3), holder=None, pending=None)
    else:
        assert decision.claim == Claim(claimed=True, action="skip")


def test_a_run_holder_never_expires() -> None:
    decision = decide(snap(active="run-1", active_claimed_at=None))
    assert decision.claim == Claim(claimed=True, action="skip")
    assert not any(isinstance(w, ReleaseReservation) for w in decision.writes)


# --- step 2: the existing-row gate -------------------------------------------------------

GATE = [
    # (description, changes, passes)
    ("duplicate with live reservation", {"active": res(9), "active_claimed_at": 999_999}, False),
    ("unfinished row, no holder", {"active": None}, True),
    ("unfinished row, own reservation expired", {"active": res(9), "active_claimed_at": 0}, True),
    (
        "unfinished row, other reservation expired",
        {"active": res(3), "active_claimed_at": 0},
        False,
    ),
    ("unfinished row, run holder", {"active": "run-1"}, False),
]


@pytest.mark.parametrize(("name", "changes", "passes"), GATE, ids=[g[0] for g in GATE])
def test_gate_resumable_reservation(name: str, changes: dict[str, Any], passes: bool) -> None:
    decision = decide(snap(existing_fire=FireState(), **changes))
    assert decision.claim.claimed is passes, name
    if not passes:
        assert decision.writes == ()


@pytest.mark.parametrize("outcome", ["completed", "failed", "skipped", "superseded", "launched"])
def test_gate_refuses_settled_and_launched_rows(outcome: Any) -> None:
    for resume in (False, True):
        decision = decide(
            snap(existing_fire=FireState(outcome=outcome, run_id="r"), resume_buffered=resume)
        )
        assert decision == decide(snap(existing_fire=FireState(outcome=outcome))).__class__(
            claim=Claim(claimed=False), writes=()
        )


def test_gate_resumable_buffer_only_when_asked() -> None:
    buffered = FireState(outcome="buffered")
    assert decide(snap(existing_fire=buffered)).claim == Claim(claimed=False)
    assert decide(snap(existing_fire=buffered, resume_buffered=True)).claim.action == "fire"


def test_gate_resumable_supersede() -> None:
    row = FireState(outcome=None, run_id="run-1")
    changes: dict[str, Any] = {"overlap": "supersede", "active": "run-1", "existing_fire": row}
    assert decide(snap(**changes)).claim == Claim(claimed=False)
    decision = decide(snap(resume_buffered=True, **changes))
    assert decision.claim == Claim(
        claimed=True, action="supersede", reservation_id=NEW, active_run_id="run-1"
    )
    other = {**changes, "active": "run-2"}
    assert decide(snap(resume_buffered=True, **other)).claim == Claim(claimed=False)
    assert decide(snap(resume_buffered=True, **{**changes, "overlap": "skip"})).claim == Claim(
        claimed=False
    )


# --- step 3: reclaim ---------------------------------------------------------------------


def test_reclaim_rearms_other_occurrence_under_skip_and_buffer() -> None:
    for overlap in ("skip", "buffer-one"):
        decision = decide(
            snap(
                overlap=overlap,
                active=res(3),
                active_claimed_at=0,
                pending=2,
                active_fire=FireState(),
            )
        )
        assert decision.writes == (
            ReleaseReservation(expected=res(3), holder=None, pending=3),
            Reserve(reservation_id=NEW, claimed_at=1_000_000),
            CountMissed(overlap=1),  # the re-armed 3 pushed 2 out of the buffer slot
        )


def test_reclaim_keeps_pending_when_expired_row_is_settled_or_malformed() -> None:
    settled = snap(active=res(3), active_claimed_at=0, active_fire=FireState(outcome="skipped"))
    assert decide(settled).writes[0] == ReleaseReservation(
        expected=res(3), holder=None, pending=None
    )
    malformed = snap(active=res("x"), active_claimed_at=0)
    assert decide(malformed).writes[0] == ReleaseReservation(
        expected=res("x"), holder=None, pending=None
    )
    missing = snap(active=res(3), active_claimed_at=0, active_fire=None, pending=1)
    assert decide(missing).writes[0] == ReleaseReservation(expected=res(3), holder=None, pending=1)


def test_reclaim_under_supersede_recovers_predecessor() -> None:
    decision = decide(
        snap(
            overlap="supersede",
            active=res(3),
            active_claimed_at=0,
            active_fire=FireState(run_id="run-1"),
        )
    )
    assert decision.writes == (
        SetOutcome(occurrence=3, outcome="superseded", while_open=False),
        ReleaseReservation(expected=res(3), holder="run-1", pending=None),
        SetRunId(occurrence=9, run_id="run-1"),
        Reserve(reservation_id=NEW, claimed_at=1_000_000),
    )
    assert decision.claim.action == "supersede"
    assert decision.claim.active_run_id == "run-1"


@pytest.mark.parametrize("overlap", ["skip", "buffer-one"])
def test_reclaim_after_an_edit_away_from_supersede_recovers_predecessor(overlap: str) -> None:
    """A supersede claimant reserved occurrence 3 over run-1 and died; the trigger was then
    edited to another policy. run-1 is still running and only the holder slot leads a tick to
    it, so releasing the reservation gives it back, whatever the policy is now (issue 21)."""
    decision = decide(
        snap(
            overlap=overlap,
            active=res(3),
            active_claimed_at=0,
            active_fire=FireState(run_id="run-1"),
        )
    )
    assert decision.writes[0] == ReleaseReservation(expected=res(3), holder="run-1", pending=3)
    # run-1 holds again, so the new boundary meets the new policy against a running run.
    assert decision.claim.action == ("skip" if overlap == "skip" else "buffer")


def test_reclaim_own_occurrence_under_supersede_marks_nothing() -> None:
    decision = decide(
        snap(
            overlap="supersede",
            active=res(9),
            active_claimed_at=0,
            existing_fire=FireState(),
            active_fire=FireState(),
        )
    )
    assert decision.writes == (
        ReleaseReservation(expected=res(9), holder=None, pending=None),
        Reserve(reservation_id=NEW, claimed_at=1_000_000),
    )


# --- steps 4-6: actions and writes -------------------------------------------------------


def test_skip_and_buffer_writes() -> None:
    skip = decide(snap(active="run-1"))
    assert skip.claim == Claim(claimed=True, action="skip")
    assert skip.writes == (
        SetOutcome(occurrence=9, outcome="skipped", while_open=False),
        AdvanceCursor(occurrence=9),
        CountMissed(overlap=1),
    )
    buffer = decide(snap(overlap="buffer-one", active="run-1", pending=12))
    assert buffer.claim == Claim(claimed=True, action="buffer")
    assert buffer.writes == (
        SetOutcome(occurrence=9, outcome="buffered", while_open=False),
        AdvanceCursor(occurrence=9),
        SetPending(pending=12),
        CountMissed(overlap=1),  # 9 behind the buffered 12: it never runs
    )


def test_dropped_counts_only_when_nothing_in_the_gap_was_taken_care_of() -> None:
    dropped = Dropped(after=5, catch_up=2, catch_up_bound=1)
    counted = CountMissed(catch_up=2, catch_up_bound=1)
    assert decide(snap(dropped=dropped)).writes[-1] == counted
    assert decide(snap(dropped=dropped, cursor=5, pending=4)).writes[-1] == counted
    for marks in ({"cursor": 6}, {"pending": 6}, {"active": res(6), "active_claimed_at": 999_000}):
        writes = decide(snap(dropped=dropped, **marks)).writes
        assert not any(isinstance(write, CountMissed) and write.catch_up for write in writes)
    # A claim that is not granted counts nothing, whatever it carries.
    assert decide(snap(dropped=dropped, existing_fire=FireState(outcome="completed"))).writes == ()
    assert dropped_applies(snap(dropped=dropped, cursor=5))
    assert not dropped_applies(snap(cursor=5))


def test_slot_displaced() -> None:
    assert slot_displaced(None, 3) is None
    assert slot_displaced(3, 3) is None
    assert slot_displaced(2, 3) == CountMissed(overlap=1)
    assert slot_displaced(4, 3) == CountMissed(overlap=1)


def test_fire_reserves_only() -> None:
    decision = decide(snap())
    assert decision.claim == Claim(claimed=True, action="fire", reservation_id=NEW)
    assert decision.writes == (Reserve(reservation_id=NEW, claimed_at=1_000_000),)


def test_supersede_a_run() -> None:
    decision = decide(snap(overlap="supersede", active="run-1"))
    assert decision.claim.active_run_id == "run-1"
    assert decision.writes == (
        SetRunId(occurrence=9, run_id="run-1"),
        Reserve(reservation_id=NEW, claimed_at=1_000_000),
    )


def test_supersede_a_live_reservation_displaces_its_predecessor() -> None:
    decision = decide(
        snap(
            overlap="supersede",
            active=res(3),
            active_claimed_at=999_000,
            active_fire=FireState(run_id="run-1"),
        )
    )
    assert decision.claim.active_run_id == "run-1"
    assert decision.writes == (
        SetOutcome(occurrence=3, outcome="superseded", while_open=True),
        SetRunId(occurrence=9, run_id="run-1"),
        Reserve(reservation_id=NEW, claimed_at=1_000_000),
    )
    bare = decide(snap(overlap="supersede", active=res(3), active_claimed_at=999_000))
    assert bare.claim.active_run_id == res(3)
    assert bare.writes == (
        SetOutcome(occurrence=3, outcome="superseded", while_open=True),
        Reserve(reservation_id=NEW, claimed_at=1_000_000),
    )


def test_supersede_a_live_malformed_reservation() -> None:
    decision = decide(snap(overlap="supersede", active=res("x"), active_claimed_at=999_000))
    assert decision.claim.active_run_id == res("x")
    assert decision.writes == (Reserve(reservation_id=NEW, claimed_at=1_000_000),)


# --- the lease (§10.4) -------------------------------------------------------------------


def test_lease_table() -> None:
    assert lease(None, None, None, 0, None) == LeaseIdle()
    assert lease("run-1", None, None, 10**12, None) == LeaseHeld(holder="run-1")
    assert lease(res(3), 1, None, LEASE, None) == LeaseHeld(holder=res(3))
    assert lease(res(3), 0, None, LEASE, None) == LeaseExpired(
        expected=res(3), write=ReplaceHolder(expected=res(3), holder=None)
    )
    assert lease(res("x"), None, 4, 0, FireState()) == LeaseExpired(
        expected=res("x"), write=ReplaceHolder(expected=res("x"), holder=None)
    )
    rearm = lease(res(3), None, 2, 0, FireState(run_id="run-0"))
    assert rearm == LeaseExpired(
        expected=res(3),
        write=ReleaseReservation(expected=res(3), holder="run-0", pending=3),
        missed=CountMissed(overlap=1),
    )
    assert rearm.holder == "run-0"
    shaped = lease(res(3), None, 7, 0, FireState(run_id=res(1)))
    assert isinstance(shaped, LeaseExpired)
    assert shaped.write == ReleaseReservation(expected=res(3), holder=None, pending=7)


# --- result refusal (§9.8.1) -------------------------------------------------------------


def result(outcome: Any, **changes: Any) -> Result:
    return Result(trigger_id="daily", occurrence=3, outcome=outcome, **changes)


def test_refusal_rules() -> None:
    live = res(3)
    row = FireState()
    refuse_result(result("launched", run_id="r", reservation_id=live), row, live)
    with pytest.raises(TriggerError, match="no longer owns"):
        refuse_result(result("launched", run_id="r"), row, live)
    # (a) harmless repeat
    refuse_result(result("completed"), FireState(outcome="completed", run_id="r"), None)
    with pytest.raises(TriggerError):
        refuse_result(
            result("completed", run_id="x"), FireState(outcome="completed", run_id="r"), None
        )
    # (b) settling a launch
    refuse_result(result("failed", run_id="r"), FireState(outcome="launched", run_id="r"), None)
    with pytest.raises(TriggerError):
        refuse_result(result("skipped"), FireState(outcome="launched", run_id="r"), None)
    with pytest.raises(TriggerError):
        refuse_result(result("completed", reservation_id=live), FireState(outcome="launched"), None)
    # (c) the reservation's owner reports
    refuse_result(result("skipped"), row, live)
    refuse_result(result("completed", reservation_id=live), row, live)
    with pytest.raises(TriggerError):
        refuse_result(result("completed", reservation_id=res(3, "old")), row, live)
    with pytest.raises(TriggerError):
        refuse_result(result("completed"), None, live)


def test_plan_result_writes() -> None:
    live = res(3)
    assert plan_result(result("launched", run_id="r", reservation_id=live), FireState(), live) == (
        WriteFire(occurrence=3, outcome="launched", run_id="r", error=None, keep_run_id=False),
        AdvanceCursor(occurrence=3),
        ReplaceHolder(expected=live, holder="r"),
    )
    assert plan_result(result("completed"), FireState(outcome="launched", run_id="r"), "r") == (
        WriteFire(occurrence=3, outcome="completed", run_id=None, error=None, keep_run_id=True),
        AdvanceCursor(occurrence=3),
        ReplaceHolder(expected="r", holder=None),
    )
    # a launched row without run id: the NULL owner never matches
    assert plan_result(result("completed"), FireState(outcome="launched"), res(4)) == (
        WriteFire(occurrence=3, outcome="completed", run_id=None, error=None, keep_run_id=True),
        AdvanceCursor(occurrence=3),
    )
    assert plan_result(result("skipped"), FireState(outcome="skipped"), None) == ()


def test_prunable() -> None:
    kw: dict[str, Any] = {"pending_at": None, "active_run_id": None, "older_than": 10}
    assert is_prunable(1, "completed", None, **kw)
    assert not is_prunable(10, "completed", None, **kw)
    assert not is_prunable(1, None, None, **kw)
    assert not is_prunable(1, "launched", "r", **kw)
    assert not is_prunable(1, "buffered", None, **kw)
    assert not is_prunable(1, "failed", None, **{**kw, "pending_at": 1})
    assert not is_prunable(1, "failed", "r", **{**kw, "active_run_id": "r"})
    assert is_prunable(1, "failed", None, **{**kw, "active_run_id": "r"})


# --- the claim decision against a model ----------------------------------------------------


@dataclass
class Model:
    """The trigger's durable state after a claim, as plain values."""

    holder: str | None
    claimed_at: int | None
    pending: int | None
    cursor_at_least: int | None = None
    outcomes: dict[int, Any] = field(default_factory=dict)
    run_ids: dict[int, str] = field(default_factory=dict)


def _occ(value: str | None) -> int | None:
    return reservation_occurrence(value)  # the identity format is tested by the foundation


def model_claim(s: ClaimSnapshot) -> tuple[Claim, Model]:
    """§10.2 re-read as a story about one trigger, written without the decision's structure."""
    start = Model(holder=s.active, claimed_at=s.active_claimed_at, pending=s.pending)
    reservation_held = s.active is not None and s.active.startswith("trigger-reservation:")
    fresh = s.active_claimed_at is not None and s.claimed_at - s.active_claimed_at < LEASE
    stale = reservation_held and not fresh
    if s.existing_fire is not None:
        row = s.existing_fire
        allowed = (
            (s.resume_buffered and row.outcome == "buffered")
            or (
                row.outcome is None
                and (s.active is None or (stale and _occ(s.active) == s.occurrence))
            )
            or (
                s.resume_buffered
                and row.outcome is None
                and s.overlap == "supersede"
                and s.active is not None
                and row.run_id == s.active
            )
        )
        if not allowed:
            return Claim(claimed=False), start
    state = Model(holder=s.active, claimed_at=s.active_claimed_at, pending=s.pending)
    if stale:
        state.holder, state.claimed_at = None, None
        owed = _occ(s.active)
        behind_expired = s.active_fire
        if (
            owed is not None
            and behind_expired is not None
            and behind_expired.outcome in (None, "buffered")
        ):
            recovered = behind_expired.run_id
            # The displaced run gets the holder back under any policy (issue 21: a policy
            # edited away from supersede must not strand it).
            if recovered is not None and not recovered.startswith("trigger-reservation:"):
                state.holder = recovered
            if s.overlap == "supersede":
                if owed != s.occurrence:
                    state.outcomes[owed] = "superseded"
            elif owed != s.occurrence:
                state.pending = owed if state.pending is None else max(state.pending, owed)
    if state.holder is not None and s.overlap in ("skip", "buffer-one"):
        decided: ClaimAction = "skip" if s.overlap == "skip" else "buffer"
        state.outcomes[s.occurrence] = "skipped" if decided == "skip" else "buffered"
        state.cursor_at_least = s.occurrence
        if decided == "buffer":
            state.pending = (
                s.occurrence if state.pending is None else max(state.pending, s.occurrence)
            )
        return Claim(claimed=True, action=decided), state
    action: ClaimAction = "fire" if state.holder is None else "supersede"
    displaced = state.holder
    if action == "supersede" and _occ(state.holder) is not None:
        behind = s.active_fire
        if (
            behind is not None
            and behind.run_id
            and not behind.run_id.startswith("trigger-reservation:")
        ):
            displaced = behind.run_id
        ao = _occ(state.holder)
        assert ao is not None
        open_row = s.active_fire
        if open_row is not None and open_row.outcome in (None, "buffered"):  # only open rows
            state.outcomes[ao] = "superseded"
    if displaced is not None and not displaced.startswith("trigger-reservation:"):
        state.run_ids[s.occurrence] = displaced
    state.holder, state.claimed_at = s.reservation_id, s.claimed_at
    claim = Claim(
        claimed=True, action=action, reservation_id=s.reservation_id, active_run_id=displaced
    )
    return claim, state


def interpret(s: ClaimSnapshot, writes: tuple[TriggerWrite, ...]) -> Model:
    """Apply decision writes to the snapshot the way a store's conditional updates do."""
    state = Model(holder=s.active, claimed_at=s.active_claimed_at, pending=s.pending)
    rows: dict[int, FireState | None] = {s.occurrence: s.existing_fire or FireState()}
    ao = _occ(s.active)
    if ao is not None and ao != s.occurrence:
        rows[ao] = s.active_fire
    for w in writes:
        if isinstance(w, SetOutcome):
            row = rows.get(w.occurrence)
            if row is not None and (not w.while_open or row.outcome in (None, "buffered")):
                state.outcomes[w.occurrence] = w.outcome
        elif isinstance(w, SetRunId):
            state.run_ids[w.occurrence] = w.run_id
        elif isinstance(w, ReleaseReservation):
            if state.holder == w.expected:
                state.holder, state.claimed_at, state.pending = w.holder, None, w.pending
        elif isinstance(w, AdvanceCursor):
            state.cursor_at_least = w.occurrence
        elif isinstance(w, SetPending):
            state.pending = w.pending
        elif isinstance(w, Reserve):
            state.holder, state.claimed_at = w.reservation_id, w.claimed_at
        elif isinstance(w, ClearPendingIf | ReplaceHolder | WriteFire):  # pragma: no cover
            raise AssertionError("not a claim write")
    return state


_HOLDERS = st.one_of(
    st.none(),
    st.sampled_from(["run-1", "run-2"]),
    st.builds(res, st.sampled_from([1, 2, 3, "x", " 4 ", ""]), st.sampled_from(["a", "b"])),
)
_FIRES = st.one_of(
    st.none(),
    st.builds(
        FireState,
        outcome=st.sampled_from([None, "buffered", "launched", "completed", "skipped"]),
        run_id=st.one_of(st.none(), st.sampled_from(["run-1", "run-2", res(1, "z")])),
    ),
)


@settings(max_examples=2000)
@given(
    occurrence=st.integers(min_value=1, max_value=4),
    overlap=st.sampled_from(["skip", "buffer-one", "supersede"]),
    active=_HOLDERS,
    age=st.one_of(st.none(), st.integers(min_value=-5, max_value=2 * LEASE)),
    pending=st.one_of(st.none(), st.integers(min_value=0, max_value=5)),
    existing=_FIRES,
    active_fire=_FIRES,
    resume=st.booleans(),
)
def test_decision_agrees_with_the_model(
    occurrence: int,
    overlap: str,
    active: str | None,
    age: int | None,
    pending: int | None,
    existing: FireState | None,
    active_fire: FireState | None,
    resume: bool,
) -> None:
    now = 10 * LEASE
    if _occ(active) is None:
        active_fire = None  # only read for a holder whose occurrence parses
    elif _occ(active) == occurrence:
        active_fire = existing or FireState()
    s = snap(
        occurrence=occurrence,
        overlap=overlap,
        active=active,
        active_claimed_at=None if age is None else now - age,
        pending=pending,
        existing_fire=existing,
        active_fire=active_fire,
        resume_buffered=resume,
        claimed_at=now,
    )
    decision = decide(s)
    claim, expected = model_claim(s)
    assert decision.claim == claim
    assert interpret(s, decision.writes) == expected
    # invariants: a reservation is granted only to a free or supersede trigger
    if claim.action == "supersede":
        assert overlap == "supersede"
        assert claim.active_run_id is not None
    if claim.reservation_id is not None:
        assert expected.holder == claim.reservation_id
        assert expected.claimed_at == now
    if expected.pending is not None and pending is not None:
        assert expected.pending >= pending
