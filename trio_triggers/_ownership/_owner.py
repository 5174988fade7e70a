"""Owner identity, the four lease constants and the input rules shared by every run store.

``ownership.md`` §1-§3. The validators here return a short *problem* text (naming the field and
the rule, never the value) or raise :class:`~trio_triggers.RunStoreError` with code
``invalid_run``; they never touch a store.
"""

from __future__ import annotations

import math
import os
import socket
import uuid
from typing import Any, Final

import msgspec

from .._errors import RunStoreError

__all__ = [
    "HEARTBEAT_INTERVAL_MS",
    "HEARTBEAT_SKEW_ALLOWANCE_MS",
    "HEARTBEAT_STALE_AFTER_MS",
    "HEARTBEAT_WRITE_TOLERANCE_MS",
    "MAX_DURABLE_TEXT",
    "MAX_INSTANT",
    "OwnerId",
    "check_owner",
    "check_timestamp",
    "durable_text_problem",
    "has_surrogate",
    "invalid",
    "owner_problem",
    "timestamp_problem",
]

HEARTBEAT_INTERVAL_MS: Final = 1_000
"""Pulse cadence of ``heartbeat_loop``; also the time bound on one ``reconfirm`` call."""

HEARTBEAT_STALE_AFTER_MS: Final = 30_000
"""A stamp strictly older than this (by the reader's clock) is stale and may be taken over."""

HEARTBEAT_SKEW_ALLOWANCE_MS: Final = 10_000
"""How far the owner's clock may lag a peer's; how far ahead of the store clock a reading may be."""

HEARTBEAT_WRITE_TOLERANCE_MS: Final = (
    HEARTBEAT_STALE_AFTER_MS - HEARTBEAT_SKEW_ALLOWANCE_MS - HEARTBEAT_INTERVAL_MS
)
"""19 000: how long an owner keeps working without a confirmed renewal before it reconfirms."""

MAX_INSTANT: Final = 2**53 - 1
"""The largest valid instant (and pid)."""

MAX_DURABLE_TEXT: Final = 1_024
"""The longest durable text (run ids, host ids, nonces, flow ids, idempotency keys)."""


class OwnerId(msgspec.Struct, frozen=True, kw_only=True):
    """The fence token: the identity that owns a run.

    Identity is exact equality of all three fields, so a restarted process (new ``nonce``)
    never inherits its predecessor's runs.
    """

    host_id: str
    """Names one pid namespace: processes that can see each other's pids share a host id."""
    pid: int
    """The OS process id inside that namespace."""
    nonce: str
    """This incarnation of the engine (a fresh random value per :meth:`for_this_process`)."""

    @classmethod
    def for_this_process(cls, host_id: str | None = None) -> OwnerId:
        """A new identity for an engine in this process (a fresh nonce on every call).

        ``host_id`` defaults to ``socket.gethostname()`` (``"localhost"`` if that is empty).
        Containers with private pid namespaces must pass distinct host ids explicitly.
        """
        if host_id is None:
            host_id = socket.gethostname() or "localhost"
        return cls(host_id=host_id, pid=os.getpid(), nonce=uuid.uuid4().hex)


def invalid(method: str, message: str) -> RunStoreError:
    """The ``invalid_run`` error of ``method``."""
    return RunStoreError("invalid_run", method, message)


def has_surrogate(text: str) -> bool:
    """Whether ``text`` holds a surrogate code point (so it cannot be encoded as UTF-8)."""
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return True
    return False


def durable_text_problem(value: Any, field: str) -> str | None:
    """Why ``value`` is not durable text (§1.7), or ``None`` if it is."""
    if not isinstance(value, str):
        return f"{field} must be a str"
    if not value:
        return f"{field} must not be empty"
    if len(value) > MAX_DURABLE_TEXT:
        return f"{field} is longer than {MAX_DURABLE_TEXT} characters"
    if "\x00" in value:
        return f"{field} must not contain NUL"
    if has_surrogate(value):
        return f"{field} must not contain surrogate code points"
    return None


def timestamp_problem(value: Any, field: str) -> str | None:
    """Why ``value`` is not a valid timestamp (§1.1), or ``None`` if it is."""
    if isinstance(value, bool) or not isinstance(value, int):
        if isinstance(value, float) and not math.isfinite(value):
            return f"{field} must be an int (not NaN or infinite)"
        return f"{field} must be an int"
    if value < 0 or value > MAX_INSTANT:
        return f"{field} must be in 0 .. 2**53 - 1"
    return None


def owner_problem(value: Any, field: str) -> str | None:
    """Why ``value`` is not a valid owner (§2), or ``None`` if it is."""
    if type(value) is not OwnerId:
        return f"{field} must be an OwnerId"
    problem = durable_text_problem(value.host_id, f"{field}.host_id")
    if problem is not None:
        return problem
    pid = value.pid
    if isinstance(pid, bool) or not isinstance(pid, int):
        return f"{field}.pid must be an int"
    if pid < 0 or pid > MAX_INSTANT:
        return f"{field}.pid must be in 0 .. 2**53 - 1"
    return durable_text_problem(value.nonce, f"{field}.nonce")


def check_owner(method: str, value: Any, field: str) -> OwnerId:
    problem = owner_problem(value, field)
    if problem is not None:
        raise invalid(method, problem)
    owner: OwnerId = value
    return owner


def check_timestamp(method: str, value: Any, field: str) -> int:
    problem = timestamp_problem(value, field)
    if problem is not None:
        raise invalid(method, problem)
    stamp: int = value
    return stamp
