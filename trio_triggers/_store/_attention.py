"""The attention index: the earliest instant a tick could have work for a trigger row.

Every trigger row carries ``attention_at_ms``, computed here by one pure function from the row's
own columns and written by the same transaction as every write that changes one of them (the
engine re-computes it for each trigger a transaction touched, :func:`refresh`). A tick reads only
the rows whose instant has come (``due``), so its cost follows what is due, not what is
registered. ``docs/store.md`` ("The attention index") explains each rule; in short, a row needs
attention at the earliest of:

* **its next boundary**: the first cron occurrence after its *base*, the latest occurrence
  already taken care of: the fire cursor (``last_fired_at_ms``), or the occurrence of the
  reservation that holds it (claimed, its launch in flight; a manual fire's is no base), or,
  for a trigger that has never fired, the instant it was registered (``registered_at_ms``),
  and never before the point a ``resume`` from now skipped to (``resume_after_ms``) or the
  window's start (``start_at_ms``); none past the window's end (``end_at_ms``). Under jitter
  the boundary's launch instant (``jitter_ms``), not the boundary. Only while enabled and not
  paused;
* **its pending occurrence**, when it can be resumed: the slot is set and nothing holds the
  trigger (or the policy is ``supersede``, which displaces the holder). Only while enabled and
  not paused;
* **its reservation's lease expiry** (``active_claimed_at_ms + RESERVATION_LEASE_MS``; at once
  for a reservation without a claim time), enabled or not: the lease is then enforced and the
  occurrence re-armed;
* **its running backfill's next boundary** (``backfill_next_ms``, a past instant: at once),
  while nothing waits in the pending slot (the backfill waits behind a buffered occurrence).
  Only while enabled and not paused.

``None`` means no tick has work for the row until a write changes it (a disabled trigger that
holds nothing, or holds a run: held runs are found by the recovery sweep, ``holding``).
:data:`UNKNOWN` marks a row whose instant is not yet known (rows from before the index existed);
the next ``due`` read computes it.
"""

from __future__ import annotations

from typing import Final

import msgspec

from .._constants import MAX_SAFE_INTEGER, RESERVATION_LEASE_MS
from .._cron import Cron
from .._errors import TriggerError
from .._identities import is_manual_reservation, is_reservation, reservation_occurrence
from .._policies import launch_at
from ._models import Listed

__all__ = ["UNKNOWN", "AttentionInputs", "DueRow", "attention_at", "parsed_cron"]

#: ``attention_at_ms`` of a row whose instant has not been computed yet (due before anything).
UNKNOWN: Final = -MAX_SAFE_INTEGER


class DueRow(msgspec.Struct, frozen=True, kw_only=True):
    """One row of a ``due`` read: the listing row, when it was registered and why it is due."""

    row: Listed
    registered_at: int | None
    attention_at: int | None


class AttentionInputs(msgspec.Struct, frozen=True, kw_only=True):
    """The columns of one ``tt_triggers`` row that decide its attention instant."""

    cron: str
    timezone: str | None
    enabled: bool
    overlap: str
    last_fired_at: int | None
    pending_at: int | None
    active: str | None
    claimed_at: int | None
    registered_at: int | None
    paused: bool = False
    resume_after: int | None = None
    backfill_next: int | None = None
    trigger_id: str = ""
    jitter_ms: int = 0
    start_at: int | None = None
    end_at: int | None = None


def parsed_cron(expression: str, timezone: str | None) -> Cron | None:
    """The parsed expression, or ``None`` when it does not parse.

    A store re-computes attention on every write: ``Cron.parse`` answers from the package's one
    cache of parsed expressions (``trio_triggers._cron``), so this costs a dictionary lookup.
    """
    try:
        return Cron.parse(expression, timezone, now=0)
    except TriggerError:
        return None


def attention_at(row: AttentionInputs) -> int | None:
    """The earliest instant at which a tick could have work for ``row`` (see the module doc)."""
    candidates: list[int] = []
    reserved: int | None = None
    if is_reservation(row.active):
        reserved = reservation_occurrence(row.active)
        if row.claimed_at is None:
            candidates.append(reserved if reserved is not None else UNKNOWN + 1)
        else:
            candidates.append(row.claimed_at + RESERVATION_LEASE_MS)
    if row.enabled and not row.paused:
        if row.pending_at is not None and (row.active is None or row.overlap == "supersede"):
            candidates.append(row.pending_at)
        if row.backfill_next is not None and row.pending_at is None:
            candidates.append(row.backfill_next)  # a past boundary: at once
        base = row.last_fired_at
        # A manual fire's reservation holds no boundary: it is no base (it never moves the
        # cursor either, docs/operations.md).
        if (
            reserved is not None
            and (base is None or reserved > base)
            and not is_manual_reservation(row.active)
        ):
            base = reserved
        if base is None:
            base = row.registered_at
        if row.resume_after is not None and (base is None or row.resume_after > base):
            base = row.resume_after
        if base is None:
            candidates.append(UNKNOWN + 1)  # no instant to count from: look at it now
        else:
            cron = parsed_cron(row.cron, row.timezone)
            try:
                if cron is None:
                    raise TriggerError("invalid_cron", "unparseable")
                # The window: nothing before start_at is owed, nothing after end_at (then the
                # row has no next boundary at all). Jitter: the boundary is due at its launch.
                if row.start_at is not None and base < row.start_at - 1:
                    base = row.start_at - 1
                following = cron.next(base)
                if row.end_at is None or following <= row.end_at:
                    candidates.append(launch_at(row.trigger_id, row.jitter_ms, cron, following))
            except TriggerError:
                # A row whose schedule cannot be evaluated is looked at by every tick, which
                # logs why (as the listing tick did); it never silently disappears.
                candidates.append(base)
    return min(candidates) if candidates else None
