"""Constants of the trigger contract (``triggers.md`` §17) and the safe-integer helper (§1.3)."""

from __future__ import annotations

from typing import Final, TypeGuard

__all__ = [
    "CANCEL_KEY_PREFIX",
    "DEFAULT_CONCURRENCY",
    "DEFAULT_HOST",
    "DEFAULT_PAGE_SIZE",
    "DURATION_BOUNDARIES_MS",
    "MAX_OCCURRENCES",
    "MAX_PAGE_SIZE",
    "MAX_SAFE_INTEGER",
    "MISSED_COUNT_LIMIT",
    "NEXT_OCCURRENCE_COUNT",
    "PRUNE_INTERVAL_MS",
    "RESERVATION_LEASE_MS",
    "RESERVATION_PREFIX",
    "is_safe_integer",
]

#: The largest integer a JSON number (an IEEE double) holds exactly: ``2**53 - 1``.
MAX_SAFE_INTEGER: Final = 2**53 - 1
#: The most occurrences one unbounded interval search returns; also the bound of ``max_catch_up``.
MAX_OCCURRENCES: Final = 1000
#: Every reservation id starts with this text (§3.3).
RESERVATION_PREFIX: Final = "trigger-reservation:"
#: How long a reservation holds a trigger before a later claim may replace it (5 minutes).
RESERVATION_LEASE_MS: Final = 300_000
#: Prefix of the control-plane cancellation idempotency key: ``"trigger-cancel:" + run_id``.
CANCEL_KEY_PREFIX: Final = "trigger-cancel:"
#: The scheduler's default host name in heartbeats and logs.
DEFAULT_HOST: Final = "local"
#: Default number of triggers a tick processes at once.
DEFAULT_CONCURRENCY: Final = 4
#: At most one fire-ledger prune per hour per scheduler instance.
PRUNE_INTERVAL_MS: Final = 3_600_000
#: Histogram bucket boundaries (milliseconds) of the duration metrics (§16.2).
DURATION_BOUNDARIES_MS: Final = (10, 100, 1000, 10000, 60000, 300000)
#: How many upcoming occurrences the dashboard readers show (§14.1).
NEXT_OCCURRENCE_COUNT: Final = 5
#: The most occurrences one decision counts as not run (a resume from now, a catch-up drop):
#: counting walks the cron, so an every-second trigger down for a year is not walked in full.
MISSED_COUNT_LIMIT: Final = 100_000
#: Default and maximum page sizes of ``fires`` (§14.3).
DEFAULT_PAGE_SIZE: Final = 100
MAX_PAGE_SIZE: Final = 500


def is_safe_integer(value: object) -> TypeGuard[int]:
    """``True`` for an ``int`` (not a ``bool``) in ``[-MAX_SAFE_INTEGER, MAX_SAFE_INTEGER]``.

    Floats are never safe integers, even when integral (§1.3).
    """
    return (
        isinstance(value, int)
        and not isinstance(value, bool)
        and -MAX_SAFE_INTEGER <= value <= MAX_SAFE_INTEGER
    )
