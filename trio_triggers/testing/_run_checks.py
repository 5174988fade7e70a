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
_FENCED: Final = frozenset(
    {"heartbeat", "reconfirm", "transition_owned", "retry_owned", "acknowledge_cancel"}
)


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
    if method in ("transition_owned", "retry_owned"):
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
    check = _Check(method, args, answer, now)
    if error is not None or method == "get":
        check.unchanged_by_failure(error, pre, post)
    elif post is None:
        check.not_removed(pre)
    else:
        check.row_shape(post)
        if pre is None:
            check.created(post)
        else:
            check.status_and_owner(pre, post)
            check.claim_and_stamps(pre, post)
            check.takeover(pre)
            check.fenced(pre)
            check.kept_columns(pre, post)
        check.claim_grants(grants)
        check.finished(post)
        check.idempotency_keys(post, grants)
        check.outcome_columns(post)
    return check.violations


class _Check:
    """The steps of :func:`check_run_transition`, one per group of invariants, each adding what
    it finds to :attr:`violations`. The steps run in the order the invariants were written, so
    the violations of one call are reported in that order too."""

    def __init__(self, method: str, args: tuple[Any, ...], answer: Any, now: int) -> None:
        self.method = method
        self.args = args
        self.answer = answer
        self.now = now
        self.run_id = args[0] if args else None
        self.violations: list[Violation] = []

    def err(self, invariant: str, detail: str) -> None:
        self.violations.append(Violation(invariant=invariant, at_ms=self.now, detail=detail))

    def unchanged_by_failure(
        self, error: BaseException | None, pre: RunRow | None, post: RunRow | None
    ) -> None:
        """O28: a call that raised (and every ``get``) left the row as it was."""
        if pre != post:
            code = error.code if isinstance(error, RunStoreError) else None
            self.err(
                "O28",
                f"{self.method}({self.run_id!r}) raised {code or error!r} but changed the row",
            )

    def not_removed(self, pre: RunRow | None) -> None:
        """O3: no call deletes a row."""
        if pre is not None:
            self.err("O3", f"row {self.run_id!r} disappeared in {self.method}")

    def row_shape(self, post: RunRow) -> None:
        """O1 / O2: the row after the call obeys the column rules on its own (an owner and a
        stamp exactly while running, both claim columns or neither, a claim only on a live
        row)."""
        run_id = self.run_id
        running = post.status == "running"
        if running != (post.owner is not None and post.heartbeat_at_ms is not None):
            self.err(
                "O2",
                f"{run_id}: status {post.status} with owner {post.owner} hb {post.heartbeat_at_ms}",
            )
        if (post.claim is None) != (post.claimed_at_ms is None):
            self.err("O2", f"{run_id}: claim columns half set")
        if post.claim is not None and post.status not in ("pending", "suspended", "running"):
            self.err("O2", f"{run_id}: claim on a {post.status} row")
        if not running and post.owner is not None:
            self.err("O1", f"{run_id}: {post.status} row has an owner")

    def created(self, post: RunRow) -> None:
        """O3: only ``create`` makes a row, and it makes it pending."""
        if self.method != "create" or post.status != "pending":
            self.err("O3", f"{self.run_id}: row created by {self.method} as {post.status}")

    def status_and_owner(self, pre: RunRow, post: RunRow) -> None:
        """O3 / O4: the status never moves back to pending nor off a terminal row, and only the
        operations that may change the owner do (claims change neither status nor owner)."""
        run_id, method = self.run_id, self.method
        if post.status == "pending" and pre.status != "pending":
            self.err("O3", f"{run_id}: {method} moved {pre.status} back to pending")
        if pre.status in _TERMINAL and post != pre:
            self.err("O3", f"{run_id}: terminal row changed by {method}")
        if pre.owner != post.owner:
            if post.owner is not None and method not in ("activate", "claim_and_own"):
                self.err("O4", f"{run_id}: owner changed by {method}")
            if post.owner is None and (
                method not in ("transition_owned", "retry_owned") or post.status == "running"
            ):
                self.err("O4", f"{run_id}: owner cleared by {method}")
        if method in ("claim", "steal") and (
            pre.status != post.status
            or pre.owner != post.owner
            or pre.heartbeat_at_ms != post.heartbeat_at_ms
        ):
            self.err("O4", f"{run_id}: {method} changed status, owner or stamp")

    def claim_and_stamps(self, pre: RunRow, post: RunRow) -> None:
        """O6 / O7 / O9: a losing activate or abandon leaves the claim, the first start is
        kept, and a won heartbeat stamps the newer of the old stamp and its reading."""
        run_id, method, answer = self.run_id, self.method, self.answer
        lost_activation = method == "activate" and not isinstance(answer, Activated)
        lost_abandon = method == "abandon_claim" and type(answer).__name__ != "Abandoned"
        if (lost_activation or lost_abandon) and _claim_of(pre) != _claim_of(post):
            self.err("O6", f"{run_id}: losing {method} changed the claim")
        if pre.started_at_ms is not None and post.started_at_ms != pre.started_at_ms:
            self.err(
                "O7", f"{run_id}: started_at changed {pre.started_at_ms} -> {post.started_at_ms}"
            )
        if method in ("heartbeat", "reconfirm") and isinstance(answer, Updated):
            reading = self.args[2]
            want = reading if pre.heartbeat_at_ms is None else max(pre.heartbeat_at_ms, reading)
            if post.heartbeat_at_ms != want:
                self.err(
                    "O9", f"{run_id}: stamp {post.heartbeat_at_ms} after {method} at {reading}"
                )

    def takeover(self, pre: RunRow) -> None:
        """O10 / O13: only a stale owner is taken over (by ``claim_and_own`` or ``steal``)."""
        run_id, method, answer = self.run_id, self.method, self.answer
        taken = (method == "claim_and_own" and isinstance(answer, Activated)) or (
            method == "steal" and isinstance(answer, Claimed)
        )
        if taken and pre.status == "running" and pre.owner is not None:
            claimant = self.args[2]
            reading = self.args[3]
            if claimant != pre.owner and (
                pre.heartbeat_at_ms is None or reading <= pre.heartbeat_at_ms + S
            ):
                self.err(
                    "O10",
                    f"{run_id}: {method} at {reading} took a run stamped {pre.heartbeat_at_ms}",
                )

    def fenced(self, pre: RunRow) -> None:
        """O16 / O17: a reconfirm never wins over a pending claim, and fenced writes by anyone
        but the owner never commit."""
        run_id, method, answer = self.run_id, self.method, self.answer
        if method == "reconfirm" and isinstance(answer, Updated) and pre.claim is not None:
            self.err("O16", f"{run_id}: reconfirm won while a claim is pending")
        if method in _FENCED and _won(method, answer) and self.args[1] != pre.owner:
            self.err("O17", f"{run_id}: {method} by {self.args[1]} won against owner {pre.owner}")

    def kept_columns(self, pre: RunRow, post: RunRow) -> None:
        """O26 / O27: the declaration columns and a cancel request or acknowledgement, once
        written, are never rewritten."""
        run_id = self.run_id
        if (
            post.flow_id != pre.flow_id
            or post.input_json != pre.input_json
            or post.idempotency_key != pre.idempotency_key
        ):
            self.err("O26", f"{run_id}: declaration columns changed by {self.method}")
        if pre.cancel_requested_at_ms is not None and (
            post.cancel_requested_at_ms != pre.cancel_requested_at_ms
        ):
            self.err("O27", f"{run_id}: cancel request rewritten")
        if pre.cancel_acknowledgement is not None and (
            post.cancel_acknowledgement != pre.cancel_acknowledgement
        ):
            self.err("O27", f"{run_id}: cancel acknowledgement rewritten")

    def claim_grants(self, grants: RunGrants) -> None:
        """O5: each ``Claimed`` grant leads to at most one ``Activated`` (remembered across
        calls in ``grants``)."""
        method, args, answer = self.method, self.args, self.answer
        if method in ("claim", "steal") and isinstance(answer, Claimed):
            grants.claims[(args[0], args[2], answer.claimed_at_ms)] = 0
        if method == "activate" and isinstance(answer, Activated):
            key = (args[0], args[1], args[2])
            grants.claims[key] = grants.claims.get(key, 0) + 1
            if grants.claims[key] > 1:
                self.err("O5", f"{self.run_id}: one claim activated twice")

    def finished(self, post: RunRow) -> None:
        """O7: a row has its finish time exactly when it is terminal."""
        if (post.finished_at_ms is not None) != (post.status in _TERMINAL):
            self.err(
                "O7", f"{self.run_id}: finished_at {post.finished_at_ms} on a {post.status} row"
            )

    def idempotency_keys(self, post: RunRow, grants: RunGrants) -> None:
        """O25: one row per idempotency key (the keys created are remembered in ``grants``)."""
        if (
            self.method == "create"
            and isinstance(self.answer, Created)
            and post.idempotency_key is not None
        ):
            seen = grants.keys.get(post.idempotency_key)
            if seen is not None and seen != post.run_id:
                self.err(
                    "O25", f"second row {post.run_id} for key {post.idempotency_key!r} (has {seen})"
                )
            grants.keys[post.idempotency_key] = post.run_id

    def outcome_columns(self, post: RunRow) -> None:
        """O26: a result only on a completed row, an error only on a failed or cancelled one."""
        if post.result_json is not None and post.status != "completed":
            self.err("O26", f"{self.run_id}: result_json on a {post.status} row")
        if post.error is not None and post.status not in ("failed", "cancelled"):
            self.err("O26", f"{self.run_id}: error on a {post.status} row")
