"""Owner identity, constants, evidence matching, checks and the pid probe (§2-§5)."""

from __future__ import annotations

import datetime
import os
import sys
from typing import Any

import pytest
import trio

from trio_triggers._ownership import (
    HEARTBEAT_INTERVAL_MS,
    HEARTBEAT_SKEW_ALLOWANCE_MS,
    HEARTBEAT_STALE_AFTER_MS,
    HEARTBEAT_WRITE_TOLERANCE_MS,
    LivenessContext,
    LivenessEvidence,
    OwnerId,
    lease_liveness,
    matches_evidence,
    probe_from_check,
    same_host_incarnation,
    same_host_pid_probe,
)

from .helpers import A, B, C, ev


def test_constants_fit_together() -> None:
    assert (HEARTBEAT_INTERVAL_MS, HEARTBEAT_STALE_AFTER_MS) == (1_000, 30_000)
    assert (HEARTBEAT_SKEW_ALLOWANCE_MS, HEARTBEAT_WRITE_TOLERANCE_MS) == (10_000, 19_000)
    assert HEARTBEAT_WRITE_TOLERANCE_MS < HEARTBEAT_STALE_AFTER_MS
    assert HEARTBEAT_SKEW_ALLOWANCE_MS > HEARTBEAT_INTERVAL_MS
    assert (
        HEARTBEAT_WRITE_TOLERANCE_MS + HEARTBEAT_SKEW_ALLOWANCE_MS + HEARTBEAT_INTERVAL_MS
        == HEARTBEAT_STALE_AFTER_MS
    )


def test_owner_for_this_process(monkeypatch: pytest.MonkeyPatch) -> None:
    one, two = OwnerId.for_this_process(), OwnerId.for_this_process()
    assert one.pid == os.getpid() == two.pid
    assert one.host_id == two.host_id
    assert one.nonce != two.nonce
    assert one != two
    assert len(one.nonce) == 32
    assert OwnerId.for_this_process("box-1").host_id == "box-1"
    monkeypatch.setattr("socket.gethostname", lambda: "")
    assert OwnerId.for_this_process().host_id == "localhost"


# §4.6: matches_evidence(A, observer, 500, e)
MATCH_TABLE = [
    (ev(A, 500, "same-host-pid-dead"), True, False),
    (ev(A, 500, "cross-host-unreachable-stale"), False, True),
    (ev(A, 500, "lease-expired"), True, True),
    (ev(A, 499, "same-host-pid-dead"), False, False),
    (ev(A, 499, "cross-host-unreachable-stale"), False, False),
    (ev(A, 499, "lease-expired"), False, False),
    (ev(B, 500, "same-host-pid-dead"), False, False),
    (ev(B, 500, "cross-host-unreachable-stale"), False, False),
    (ev(B, 500, "lease-expired"), False, False),
]


@pytest.mark.parametrize(("evidence", "by_b", "by_c"), MATCH_TABLE)
def test_matches_evidence_table(evidence: LivenessEvidence, by_b: bool, by_c: bool) -> None:
    assert matches_evidence(A, B, 500, evidence) is by_b
    assert matches_evidence(A, C, 500, evidence) is by_c


def test_matches_evidence_exact_instant_and_identity() -> None:
    assert matches_evidence(A, B, 501, ev(A, 500, "lease-expired")) is False
    other_nonce = OwnerId(host_id="host-a", pid=101, nonce="owner-a2")
    assert matches_evidence(other_nonce, B, 500, ev(A, 500, "lease-expired")) is False
    assert matches_evidence(None, B, 500, ev(A, 500, "lease-expired")) is False
    assert matches_evidence(A, B, 500, None) is False


def test_same_host_incarnation_ignores_pid_and_nonce() -> None:
    assert same_host_incarnation(A, B) is True
    assert same_host_incarnation(A, C) is False


def ctx(claimant: OwnerId, heartbeat: int | None, now: int) -> LivenessContext:
    return LivenessContext(claimant=claimant, heartbeat_at_ms=heartbeat, now_ms=now)


async def test_lease_liveness_examples() -> None:
    check = lease_liveness()
    assert await check(A, ctx(B, 0, 30_000)) is True
    assert await check(A, ctx(B, 0, 30_001)) is False
    assert await check(A, ctx(B, None, 5_000)) is False
    one = lease_liveness(1.0)
    assert await one(A, ctx(B, 4_000, 5_000)) is True
    assert await one(A, ctx(B, 3_999, 5_000)) is False
    delta = lease_liveness(datetime.timedelta(seconds=2))
    assert await delta(A, ctx(B, 3_000, 5_000)) is True
    assert await delta(A, ctx(B, 2_999, 5_000)) is False


@pytest.mark.parametrize("bad", [0, -1, 0.0, float("nan"), float("inf"), True, "3"])
def test_lease_liveness_refuses_bad_durations(bad: Any) -> None:
    with pytest.raises(ValueError, match=r"^stale_after must be"):
        lease_liveness(bad)


async def test_probe_from_check_builds_fresh_evidence() -> None:
    async def dead(owner: OwnerId, context: LivenessContext) -> bool:
        seen.append(context)
        return False

    async def alive(owner: OwnerId, context: LivenessContext) -> bool:
        return True

    async def broken(owner: OwnerId, context: LivenessContext) -> bool:
        raise RuntimeError("probe failed")

    seen: list[LivenessContext] = []
    probe = probe_from_check(dead, 123)
    assert await probe(A, B, 777) == ev(A, 777, "same-host-pid-dead")
    assert await probe(A, C, 778) == ev(A, 778, "cross-host-unreachable-stale")
    assert seen[0] == ctx(B, 123, 777)
    assert await probe_from_check(alive, 1)(A, B, 5) is None
    assert await probe_from_check(broken, 1)(A, B, 5) is None  # fail closed


# --- same_host_pid_probe against real processes -----------------------------------------------


def me(pid: Any) -> OwnerId:
    return OwnerId(host_id="this-host", pid=pid, nonce="n")


OBSERVER = OwnerId(host_id="this-host", pid=os.getpid(), nonce="observer")


async def test_pid_probe_reaped_child_is_dead() -> None:
    child = await trio.lowlevel.open_process([sys.executable, "-c", "pass"])
    assert await child.wait() == 0  # exited and reaped
    assert await same_host_pid_probe(me(child.pid), ctx(OBSERVER, 0, 0)) is False


async def test_pid_probe_this_process_and_running_child_are_alive() -> None:
    assert await same_host_pid_probe(me(os.getpid()), ctx(OBSERVER, 0, 0)) is True
    child = await trio.lowlevel.open_process([sys.executable, "-c", "import time; time.sleep(30)"])
    try:
        assert await same_host_pid_probe(me(child.pid), ctx(OBSERVER, 0, 0)) is True
    finally:
        child.kill()
        await child.wait()


@pytest.mark.parametrize("pid", [0, -1, -os.getpid(), 1.5, True, "12", 2**53])
async def test_pid_probe_never_signals_odd_pids(monkeypatch: pytest.MonkeyPatch, pid: Any) -> None:
    calls: list[tuple[int, int]] = []
    monkeypatch.setattr(os, "kill", lambda p, s: calls.append((p, s)))
    assert await same_host_pid_probe(me(pid), ctx(OBSERVER, 0, 0)) is True
    assert calls == []


async def test_pid_probe_does_not_probe_another_host(monkeypatch: pytest.MonkeyPatch) -> None:
    calls: list[tuple[int, int]] = []
    monkeypatch.setattr(os, "kill", lambda p, s: calls.append((p, s)))
    remote = OwnerId(host_id="other-host", pid=os.getpid(), nonce="n")
    assert await same_host_pid_probe(remote, ctx(OBSERVER, 0, 0)) is False
    assert calls == []


@pytest.mark.parametrize(
    ("raised", "alive"),
    [
        (ProcessLookupError(3, "no such process"), False),
        (PermissionError(1, "not permitted"), True),
        (OSError(22, "invalid"), True),
        (OverflowError("too big"), True),
        (None, True),
    ],
)
async def test_pid_probe_only_esrch_proves_death(
    monkeypatch: pytest.MonkeyPatch, raised: BaseException | None, alive: bool
) -> None:
    calls: list[tuple[int, int]] = []

    def kill(pid: int, sig: int) -> None:
        calls.append((pid, sig))
        if raised is not None:
            raise raised

    monkeypatch.setattr(os, "kill", kill)
    assert await same_host_pid_probe(me(4242), ctx(OBSERVER, 0, 0)) is alive
    assert calls == [(4242, 0)]


async def test_pid_probe_without_posix_is_alive(monkeypatch: pytest.MonkeyPatch) -> None:
    calls: list[int] = []
    monkeypatch.setattr(os, "kill", lambda p, s: calls.append(p))
    monkeypatch.setattr(os, "name", "nt")
    assert await same_host_pid_probe(me(4242), ctx(OBSERVER, 0, 0)) is True
    assert calls == []


def test_shipped_checks_and_stores_satisfy_the_protocols() -> None:
    """Typing-level conformance (mypy checks these assignments), plus a runtime sanity check."""
    from trio_triggers._ownership import LivenessCheck, MemoryRunStore, RunStore

    checks: list[LivenessCheck] = [same_host_pid_probe, lease_liveness()]
    store: RunStore = MemoryRunStore()
    assert all(callable(check) for check in checks)
    assert callable(store.claim_and_own)
