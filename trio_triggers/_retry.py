"""Retry policies of flows: how many attempts, how long between them, which failures count.

A :class:`RetryPolicy` belongs to a flow (``LocalRunner.register(..., retry=...)``, or
``[flows.NAME.retry]`` in a config file). When an attempt fails and the policy allows another,
the runner records the failure in the run's attempt log and the instant of the next attempt in
the same write (``retry_owned``), so a crash between two attempts loses nothing and never runs
an attempt twice; the run stays active (its trigger's overlap policy still sees it) until its
last attempt ends. See docs/failures.md.
"""

from __future__ import annotations

import hashlib
import math
from typing import Final

import msgspec

from ._errors import TriggerError

__all__ = ["TIMEOUT", "RetryPolicy"]

#: The ``retry_on`` name that matches an attempt ended by its flow's ``timeout``.
TIMEOUT: Final = "timeout"

#: Each delay is shortened by up to this fraction, by an amount derived from the run and the
#: attempt: runs that failed together (a database restart) do not all retry in the same second.
_JITTER: Final = 0.2


def _seconds(name: str, value: object, *, zero: bool) -> float:
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise TriggerError("invalid_options", f"{name} must be a number of seconds", name)
    number = float(value)
    if not math.isfinite(number) or number < 0 or (number == 0 and not zero):
        what = "a finite non-negative" if zero else "a finite positive"
        raise TriggerError("invalid_options", f"{name} must be {what} number of seconds", name)
    return number


class RetryPolicy(msgspec.Struct, frozen=True, kw_only=True):
    """How a failed attempt of a flow is retried.

    * ``max_attempts``: attempts in all, the first included (``1`` never retries);
    * ``initial_delay``: seconds before the second attempt; each later delay is ``multiplier``
      times the one before, capped at ``max_delay``. Each is then shortened by up to 20 %, by
      an amount derived from the run id and the attempt (the same in every process, and in a
      replayed simulation);
    * ``retry_on``: the failures worth another attempt. ``None`` (the default) retries every
      failure. Otherwise a list of exit statuses (ints, for command flows), exception class
      names (``"ConnectionError"``, or ``"module.ConnectionError"``) and ``"timeout"`` (an
      attempt ended by the flow's timeout); a failure matching none of them ends the run at
      once. A cancelled run is never retried.
    """

    max_attempts: int = 3
    initial_delay: float = 1.0
    max_delay: float = 60.0
    multiplier: float = 2.0
    retry_on: tuple[int | str, ...] | None = None

    def __post_init__(self) -> None:
        attempts = self.max_attempts
        if isinstance(attempts, bool) or not isinstance(attempts, int) or attempts < 1:
            raise TriggerError(
                "invalid_options", "max_attempts must be a positive integer", "max_attempts"
            )
        initial = _seconds("initial_delay", self.initial_delay, zero=True)
        cap = _seconds("max_delay", self.max_delay, zero=True)
        if cap < initial:
            raise TriggerError(
                "invalid_options", "max_delay must not be shorter than initial_delay", "max_delay"
            )
        multiplier = self.multiplier
        if (
            isinstance(multiplier, bool)
            or not isinstance(multiplier, int | float)
            or not math.isfinite(multiplier)
            or multiplier < 1
        ):
            raise TriggerError(
                "invalid_options", "multiplier must be a finite number >= 1", "multiplier"
            )
        if self.retry_on is not None:
            if isinstance(self.retry_on, str | bytes):
                raise TriggerError(
                    "invalid_options", "retry_on must be a list, not a string", "retry_on"
                )
            for i, item in enumerate(self.retry_on):
                if isinstance(item, bool) or not (
                    (isinstance(item, int) and -255 <= item <= 255)
                    or (isinstance(item, str) and item.strip() == item and item)
                ):
                    raise TriggerError(
                        "invalid_options",
                        "retry_on holds exit statuses (integers) and exception names",
                        f"retry_on[{i}]",
                    )

    def delay_ms(self, attempt: int, run_id: str) -> int:
        """Milliseconds to wait after failed attempt ``attempt`` (1-based) of ``run_id``."""
        base = min(self.max_delay, self.initial_delay * self.multiplier ** (attempt - 1))
        digest = hashlib.blake2b(f"{run_id}:{attempt}".encode(), digest_size=8).digest()
        fraction = int.from_bytes(digest, "big") / 2**64
        return round(base * (1 - _JITTER * fraction) * 1000)

    def retries(self, failure: Failure) -> bool:
        """Whether ``failure`` is worth another attempt (ignoring how many are left)."""
        if self.retry_on is None:
            return True
        for item in self.retry_on:
            if isinstance(item, int):
                if failure.exit_status == item:
                    return True
            elif item == TIMEOUT:
                if failure.timed_out:
                    return True
            elif item in failure.names:
                return True
        return False


class Failure(msgspec.Struct, frozen=True, kw_only=True):
    """What a failed attempt says about itself, for :meth:`RetryPolicy.retries`."""

    names: frozenset[str] = frozenset()
    exit_status: int | None = None
    timed_out: bool = False

    @classmethod
    def of(cls, exc: BaseException) -> Failure:
        """The failure an exception raised by a flow describes."""
        kind = type(exc)
        names = {kind.__name__, f"{kind.__module__}.{kind.__qualname__}"}
        status = getattr(exc, "returncode", None)
        if isinstance(status, bool) or not isinstance(status, int):
            status = None
        timed_out = getattr(exc, "timed_out", False) is True
        return cls(names=frozenset(names), exit_status=status, timed_out=timed_out)
