"""Run-store transition checks (``ownership.md`` §14, the statements about rows and stamps).

:func:`check_run_transition` compares one run row before and after one run-store call; the
fault-injecting :class:`~trio_triggers.testing.FaultyRunStore` serialises calls so that the two
rows are exactly the state around that one transaction.
"""

from __future__ import annotations

from typing import Any, Final

from .._errors import RunStoreError
from .._ownership._models import (
    Activated,
    Claimed,
    Created,
    RunRow,
    Transitioned,
    Updated,
)
from .._ownership._owner import HEARTBEAT_STALE_AFTER_MS
from ._invariants import Violation

__all__ = ["RunGrants", "check_run_transition"]

S: Final = HEARTBEAT_STALE_AFTER_MS
_TERMINAL: Final = frozenset({"completed", "failed", "cancelled"})
_FENCED: Final = frozenset({"heartbeat", "reconfirm", "transition_owned", "acknowledge_cancel"})


class RunGrants:
    """What the run checker remembers across calls."""

    def __init__(self) -> None:
        self.keys: dict[str, str] = {}
        self.claims: dict[tuple[str, Any, int], int] = {}


def _claim_of(row: RunRow | None) -> tuple[Any, Any]:
    if row is None:
        return (None, None)
    return (row.claim, row.claimed_at_ms)


def _won(method: str, answer: Any) -> bool:
    if method in ("heartbeat", "reconfirm"):
        return isinstance(answer, Updated)
    if method == "transition_owned":
        return isinstance(answer, Transitioned)
    if method == "acknowledge_cancel":
        return answer is True
    return False


def check_run_transition(
    *,
    method: str,
    args: tuple[Any, ...],
    answer: Any,
    error: BaseException | None,
    pre: RunRow | None,
    post: RunRow | None,
    grants: RunGrants,
    now: int,
) -> list[Violation]:
    """Check one run-store call against O1-O7, O9, O10, O13, O16, O17 and O25-O28."""
    out: list[Violation] = []

    def err(invariant: str, detail: str) -> None:
        out.append(Violation(invariant=invariant, at_ms=now, detail=detail))

    run_id = args[0] if args else None
    if error is not None or method == "get":
        if pre != post:
            code = error.code if isinstance(error, RunStoreError) else None
            err("O28", f"{method}({run_id!r}) raised {code or error!r} but changed the row")
        return out
    if post is None:
        if pre is not None:
            err("O3", f"row {run_id!r} disappeared in {method}")
        return out
    # O1 / O2: row shape.
    running = post.status == "running"
    if running != (post.owner is not None and post.heartbeat_at_ms is not None):
        err(
            "O2",
            f"{run_id}: status {post.status} with owner {post.owner} hb {post.heartbeat_at_ms}",
        )
    if (post.claim is None) != (post.claimed_at_ms is None):
        err("O2", f"{run_id}: claim columns half set")
    if post.claim is not None and post.status not in ("pending", "suspended", "running"):
        err("O2", f"{run_id}: claim on a {post.status} row")
    if not running and post.owner is not None:
        err("O1", f"{run_id}: {post.status} row has an owner")
    # O3
    if pre is None:
        if method != "create" or post.status != "pending":
            err("O3", f"{run_id}: row created by {method} as {post.status}")
    else:
        if post.status == "pending" and pre.status != "pending":
            err("O3", f"{run_id}: {method} moved {pre.status} back to pending")
        if pre.status in _TERMINAL and post != pre:
            err("O3", f"{run_id}: terminal row changed by {method}")
        # O4
        if pre.owner != post.owner:
            if post.owner is not None and method not in ("activate", "claim_and_own"):
                err("O4", f"{run_id}: owner changed by {method}")
            if post.owner is None and (method != "transition_owned" or post.status == "running"):
                err("O4", f"{run_id}: owner cleared by {method}")
        if method in ("claim", "steal") and (
            pre.status != post.status
            or pre.owner != post.owner
            or pre.heartbeat_at_ms != post.heartbeat_at_ms
        ):
            err("O4", f"{run_id}: {method} changed status, owner or stamp")
        # O6
        lost_activation = method == "activate" and not isinstance(answer, Activated)
        lost_abandon = method == "abandon_claim" and type(answer).__name__ != "Abandoned"
        if (lost_activation or lost_abandon) and _claim_of(pre) != _claim_of(post):
            err("O6", f"{run_id}: losing {method} changed the claim")
        # O7
        if pre.started_at_ms is not None and post.started_at_ms != pre.started_at_ms:
            err("O7", f"{run_id}: started_at changed {pre.started_at_ms} -> {post.started_at_ms}")
        # O9
        if method in ("heartbeat", "reconfirm") and isinstance(answer, Updated):
            reading = args[2]
            want = reading if pre.heartbeat_at_ms is None else max(pre.heartbeat_at_ms, reading)
            if post.heartbeat_at_ms != want:
                err("O9", f"{run_id}: stamp {post.heartbeat_at_ms} after {method} at {reading}")
        # O10 / O13: only a stale owner is taken over.
        taken = (method == "claim_and_own" and isinstance(answer, Activated)) or (
            method == "steal" and isinstance(answer, Claimed)
        )
        if taken and pre.status == "running" and pre.owner is not None:
            claimant = args[2]
            reading = args[3]
            if claimant != pre.owner and (
                pre.heartbeat_at_ms is None or reading <= pre.heartbeat_at_ms + S
            ):
                err(
                    "O10",
                    f"{run_id}: {method} at {reading} took a run stamped {pre.heartbeat_at_ms}",
                )
        # O16
        if method == "reconfirm" and isinstance(answer, Updated) and pre.claim is not None:
            err("O16", f"{run_id}: reconfirm won while a claim is pending")
        # O17: fenced writes by anyone but the owner never commit.
        if method in _FENCED and _won(method, answer) and args[1] != pre.owner:
            err("O17", f"{run_id}: {method} by {args[1]} won against owner {pre.owner}")
        # O26
        if (
            post.flow_id != pre.flow_id
            or post.input_json != pre.input_json
            or post.idempotency_key != pre.idempotency_key
        ):
            err("O26", f"{run_id}: declaration columns changed by {method}")
        # O27
        if pre.cancel_requested_at_ms is not None and (
            post.cancel_requested_at_ms != pre.cancel_requested_at_ms
        ):
            err("O27", f"{run_id}: cancel request rewritten")
        if pre.cancel_acknowledgement is not None and (
            post.cancel_acknowledgement != pre.cancel_acknowledgement
        ):
            err("O27", f"{run_id}: cancel acknowledgement rewritten")
    # O5: each Claimed grant leads to at most one Activated.
    if method in ("claim", "steal") and isinstance(answer, Claimed):
        grants.claims[(args[0], args[2], answer.claimed_at_ms)] = 0
    if method == "activate" and isinstance(answer, Activated):
        key = (args[0], args[1], args[2])
        grants.claims[key] = grants.claims.get(key, 0) + 1
        if grants.claims[key] > 1:
            err("O5", f"{run_id}: one claim activated twice")
    # O7
    if (post.finished_at_ms is not None) != (post.status in _TERMINAL):
        err("O7", f"{run_id}: finished_at {post.finished_at_ms} on a {post.status} row")
    # O25
    if method == "create" and isinstance(answer, Created) and post.idempotency_key is not None:
        seen = grants.keys.get(post.idempotency_key)
        if seen is not None and seen != post.run_id:
            err("O25", f"second row {post.run_id} for key {post.idempotency_key!r} (has {seen})")
        grants.keys[post.idempotency_key] = post.run_id
    # O26
    if post.result_json is not None and post.status != "completed":
        err("O26", f"{run_id}: result_json on a {post.status} row")
    if post.error is not None and post.status not in ("failed", "cancelled"):
        err("O26", f"{run_id}: error on a {post.status} row")
    return out
