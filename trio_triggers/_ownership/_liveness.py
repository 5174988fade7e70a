"""Liveness evidence, checks and probes (``ownership.md`` §4-§5).

A *check* answers "is the owner still alive?" (``True`` refuses a takeover); a *probe* turns a
check into the :class:`LivenessEvidence` that ``steal``, ``claim_and_own`` and
``recover_claim`` demand. The store never probes anything itself: it validates the evidence it
is given, and it still insists that the row be stale by its own reading.
"""

from __future__ import annotations

import datetime
import errno
import math
import os
from typing import Literal, Protocol

import msgspec

from ._owner import MAX_INSTANT, OwnerId

__all__ = [
    "EvidenceKind",
    "LivenessCheck",
    "LivenessContext",
    "LivenessEvidence",
    "LivenessProbe",
    "lease_liveness",
    "matches_evidence",
    "probe_from_check",
    "same_host_incarnation",
    "same_host_pid_probe",
]

EvidenceKind = Literal["same-host-pid-dead", "cross-host-unreachable-stale", "lease-expired"]
EVIDENCE_KINDS: frozenset[str] = frozenset(
    ("same-host-pid-dead", "cross-host-unreachable-stale", "lease-expired")
)


class LivenessEvidence(msgspec.Struct, frozen=True, kw_only=True):
    """A statement, made at ``checked_at_ms``, that ``expected_owner`` is no longer live."""

    expected_owner: OwnerId
    checked_at_ms: int
    kind: EvidenceKind


class LivenessContext(msgspec.Struct, frozen=True, kw_only=True):
    """What a :class:`LivenessCheck` is told about the takeover it is asked to judge."""

    claimant: OwnerId
    heartbeat_at_ms: int | None
    now_ms: int


class LivenessCheck(Protocol):
    """``True`` = the owner is alive = refuse the takeover. Must not raise (raising = alive)."""

    async def __call__(self, expected_owner: OwnerId, context: LivenessContext, /) -> bool: ...


class LivenessProbe(Protocol):
    """Produces the evidence handed to the store, or ``None`` when the owner may be alive."""

    async def __call__(
        self, expected_owner: OwnerId, claimant: OwnerId, checked_at_ms: int, /
    ) -> LivenessEvidence | None: ...


def same_host_incarnation(expected_owner: OwnerId, claimant: OwnerId) -> bool:
    """Whether both identities live in one pid namespace (equal ``host_id``)."""
    return expected_owner.host_id == claimant.host_id


def matches_evidence(
    expected_owner: OwnerId | None,
    observer: OwnerId,
    now_ms: int,
    evidence: LivenessEvidence | None,
) -> bool:
    """Whether ``evidence`` may be spent by ``observer`` at ``now_ms`` against ``expected_owner``.

    True only for evidence about exactly that owner, observed at exactly ``now_ms`` and of a
    kind whose host relation holds (§4.2). ``None`` for either the owner or the evidence never
    matches.
    """
    if expected_owner is None or evidence is None:
        return False
    if evidence.expected_owner != expected_owner or evidence.checked_at_ms != now_ms:
        return False
    # A bool is an int subclass: ``True == 1``; exactness keeps ``checked_at_ms=True`` out.
    if type(evidence.checked_at_ms) is not int or type(now_ms) is not int:
        return False
    same_host = expected_owner.host_id == observer.host_id
    if evidence.kind == "same-host-pid-dead":
        return same_host
    if evidence.kind == "cross-host-unreachable-stale":
        return not same_host
    return evidence.kind == "lease-expired"


def probe_from_check(check: LivenessCheck, heartbeat_at_ms: int | None) -> LivenessProbe:
    """A probe that asks ``check`` and, when it answers "not alive", returns evidence.

    The evidence kind is ``same-host-pid-dead`` between equal host ids and
    ``cross-host-unreachable-stale`` otherwise. Pass the row's ``heartbeat_at_ms`` for a
    stale owner and its ``claimed_at_ms`` for a stale claimant.
    """

    async def probe(
        expected_owner: OwnerId, claimant: OwnerId, checked_at_ms: int
    ) -> LivenessEvidence | None:
        context = LivenessContext(
            claimant=claimant, heartbeat_at_ms=heartbeat_at_ms, now_ms=checked_at_ms
        )
        try:
            alive = bool(await check(expected_owner, context))
        except Exception:
            alive = True  # fail closed
        if alive:
            return None
        kind: EvidenceKind = (
            "same-host-pid-dead"
            if same_host_incarnation(expected_owner, claimant)
            else "cross-host-unreachable-stale"
        )
        return LivenessEvidence(
            expected_owner=expected_owner, checked_at_ms=checked_at_ms, kind=kind
        )

    return probe


def _duration_ms(value: float | datetime.timedelta, name: str) -> int:
    if isinstance(value, datetime.timedelta):
        seconds = value.total_seconds()
    elif isinstance(value, bool) or not isinstance(value, int | float):
        raise ValueError(f"{name} must be seconds (a float) or a datetime.timedelta")
    else:
        seconds = float(value)
    if not math.isfinite(seconds) or seconds <= 0:
        raise ValueError(f"{name} must be positive and finite")
    ms = round(seconds * 1000)
    if ms <= 0:
        raise ValueError(f"{name} must be at least one millisecond")
    return ms


class _LeaseLiveness:
    __slots__ = ("stale_after_ms",)

    def __init__(self, stale_after_ms: int) -> None:
        self.stale_after_ms = stale_after_ms

    async def __call__(self, expected_owner: OwnerId, context: LivenessContext) -> bool:
        stamp = context.heartbeat_at_ms
        return stamp is not None and stamp >= context.now_ms - self.stale_after_ms

    def __repr__(self) -> str:
        return f"lease_liveness(stale_after={self.stale_after_ms / 1000})"


def lease_liveness(stale_after: float | datetime.timedelta = 30) -> LivenessCheck:
    """A check that answers alive exactly while the recorded stamp is fresh (§5.4).

    ``stale_after`` is seconds (or a ``timedelta``); the cutoff is strict like the store's:
    a stamp exactly ``stale_after`` old is still alive.
    """
    return _LeaseLiveness(_duration_ms(stale_after, "stale_after"))


async def same_host_pid_probe(expected_owner: OwnerId, context: LivenessContext) -> bool:
    """Signal-0 probe of the owner's pid, only when it shares the claimant's host (§5.5).

    Answers ``False`` (not alive) for another host without probing, and for a pid that
    ``os.kill(pid, 0)`` reports as ``ESRCH``; every other case is alive (fail closed).
    """
    if expected_owner.host_id != context.claimant.host_id:
        return False
    pid = expected_owner.pid
    if isinstance(pid, bool) or not isinstance(pid, int) or pid <= 0 or pid > MAX_INSTANT:
        return True
    if os.name != "posix":
        return True
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except OSError as exc:
        return exc.errno != errno.ESRCH
    except Exception:
        return True
    return True
