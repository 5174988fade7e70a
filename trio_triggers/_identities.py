"""Identities of fires (``triggers.md`` §3): ISO rendering, idempotency keys, reservation ids.

These strings are a cross-process wire format: every scheduler process, every attempt and
every store must produce and read exactly the same text, so they are built with plain
integer arithmetic and never depend on the host's zone or locale.
"""

from __future__ import annotations

import datetime
import re
import uuid
from typing import Final

from ._constants import RESERVATION_PREFIX

__all__ = [
    "BOUNDARY_STAMP_LENGTH",
    "idempotency_key",
    "is_manual_reservation",
    "is_reservation",
    "iso",
    "mint_reservation_id",
    "reservation_id",
    "reservation_occurrence",
]

_EPOCH = datetime.datetime(1970, 1, 1)
_SIGNED_DIGITS = re.compile(r"[+-]?[0-9]+", re.ASCII)
_ASCII_WHITESPACE = " \t\n\r\x0b\x0c"


def iso(ms: int) -> str:
    """Render an instant as ``YYYY-MM-DDTHH:MM:SS.mmmZ`` (UTC), for years 0001-9999.

    >>> iso(3 * 3_600_000)
    '1970-01-01T03:00:00.000Z'

    Raises ``ValueError`` for an instant outside the representable years.
    """
    seconds, millis = divmod(ms, 1000)
    try:
        when = _EPOCH + datetime.timedelta(seconds=seconds)
    except OverflowError:
        raise ValueError(f"instant {ms} is outside the years 0001-9999") from None
    return (
        f"{when.year:04d}-{when.month:02d}-{when.day:02d}T"
        f"{when.hour:02d}:{when.minute:02d}:{when.second:02d}.{millis:03d}Z"
    )


#: The length of the instant that ends a boundary's idempotency key (``iso`` of years 1-9999).
BOUNDARY_STAMP_LENGTH: Final = len("1970-01-01T00:00:00.000Z")


def idempotency_key(trigger_id: str, occurrence: int) -> str:
    """``"<trigger_id>:<iso(occurrence)>"``: the same for every attempt, process and instance."""
    return f"{trigger_id}:{iso(occurrence)}"


def reservation_id(trigger_id: str, occurrence: int, attempt: str | None = None) -> str:
    """``RESERVATION_PREFIX + trigger_id + ":" + (attempt + ":" if attempt else "") + occurrence``.

    >>> reservation_id("hourly", 3_600_000)
    'trigger-reservation:hourly:3600000'
    """
    middle = f"{attempt}:" if attempt else ""
    return f"{RESERVATION_PREFIX}{trigger_id}:{middle}{occurrence}"


#: The attempt segment of a manual fire's reservation starts with this ("run now").
MANUAL_ATTEMPT_PREFIX: Final = "manual-"


def mint_reservation_id(trigger_id: str, occurrence: int, *, manual: bool = False) -> str:
    """A fresh reservation id with a ``uuid4`` attempt segment (what both stores write).

    The attempt segment makes two claims of the same occurrence distinguishable, so a stale
    reservation can never be mistaken for a newer one. A manual fire's segment is
    ``manual-<uuid4>``: what reads only the trigger row (the attention index) can then tell
    that the reservation holds no boundary of the schedule.
    """
    attempt = str(uuid.uuid4())
    return reservation_id(
        trigger_id, occurrence, MANUAL_ATTEMPT_PREFIX + attempt if manual else attempt
    )


def is_reservation(value: object) -> bool:
    """``True`` when ``value`` is a ``str`` starting with ``RESERVATION_PREFIX``."""
    return isinstance(value, str) and value.startswith(RESERVATION_PREFIX)


def is_manual_reservation(value: object) -> bool:
    """Whether ``value`` is the reservation of a manual fire (minted with ``manual=True``)."""
    if not is_reservation(value):
        return False
    assert isinstance(value, str)
    attempt = value.rpartition(":")[0].rpartition(":")[2]
    return attempt.startswith(MANUAL_ATTEMPT_PREFIX)


def reservation_occurrence(value: object) -> int | None:
    """The occurrence a reservation id names, or ``None`` (not a reservation, or malformed).

    The text after the last ``:`` with ASCII whitespace stripped: empty gives ``0``, an
    optional sign and ASCII digits give that ``int``, anything else gives ``None``.
    """
    if not is_reservation(value):
        return None
    assert isinstance(value, str)
    tail = value.rpartition(":")[2].strip(_ASCII_WHITESPACE)
    if not tail:
        return 0
    if _SIGNED_DIGITS.fullmatch(tail) is None:
        return None
    return int(tail)
