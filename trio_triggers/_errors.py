"""The three public exception types.

Error codes are stable API (``triggers.md`` §15, ``ownership.md`` §9). Messages name the
trigger or run and never include secret input.
"""

from __future__ import annotations

from typing import Literal

__all__ = [
    "LeaseLost",
    "LeaseLostReason",
    "RunStoreError",
    "RunStoreErrorCode",
    "TriggerError",
    "TriggerErrorCode",
    "describe_error",
]

TriggerErrorCode = Literal[
    "unknown_trigger",
    "trigger_disabled",
    "trigger_paused",
    "key_conflict",
    "revision_mismatch",
    "stale_owner",
    "invalid_schedule",
    "invalid_trigger",
    "invalid_options",
    "invalid_cron",
    "unsatisfiable_cron",
    "catch_up_bound_exceeded",
    "runner",
    "runner_timeout",
    "store",
]

RunStoreErrorCode = Literal[
    "invalid_run",
    "not_found_row",
    "constraint",
    "decode_failed",
    "persistence_failed",
]

LeaseLostReason = Literal["fence_lost", "lapsed", "not_found"]


class TriggerError(Exception):
    """A typed failure of the trigger half: ``.code``, ``.message`` and ``.path``.

    ``str(err) == err.message``. The underlying error, if any, is chained as ``__cause__``.
    """

    code: TriggerErrorCode
    message: str
    path: str | None

    def __init__(self, code: TriggerErrorCode, message: str, path: str | None = None) -> None:
        super().__init__(message)
        self.code = code
        self.message = message
        self.path = path

    def __str__(self) -> str:
        return self.message

    def __repr__(self) -> str:
        return f"TriggerError(code={self.code!r}, message={self.message!r}, path={self.path!r})"


class RunStoreError(Exception):
    """A typed failure of a run store: ``.code``, ``.method`` and ``.message``.

    ``str(err)`` is ``"<code>: RunStore.<method>: <message>"``.
    """

    code: RunStoreErrorCode
    method: str
    message: str

    def __init__(self, code: RunStoreErrorCode, method: str, message: str) -> None:
        super().__init__(f"{code}: RunStore.{method}: {message}")
        self.code = code
        self.method = method
        self.message = message

    def __str__(self) -> str:
        return f"{self.code}: RunStore.{self.method}: {self.message}"

    def __repr__(self) -> str:
        return (
            f"RunStoreError(code={self.code!r}, method={self.method!r}, message={self.message!r})"
        )


class LeaseLost(Exception):
    """Ownership of a run is gone; raised out of ``heartbeat_loop`` and ``hold_lease``."""

    run_id: str
    reason: LeaseLostReason
    unconfirmed_ms: int | None

    def __init__(
        self, run_id: str, reason: LeaseLostReason, unconfirmed_ms: int | None = None
    ) -> None:
        self.run_id = run_id
        self.reason = reason
        self.unconfirmed_ms = unconfirmed_ms if reason == "lapsed" else None
        super().__init__(str(self))

    def __str__(self) -> str:
        text = f"lease lost for run {self.run_id}: {self.reason}"
        if self.reason == "lapsed" and self.unconfirmed_ms is not None:
            text += f" after {self.unconfirmed_ms} ms unconfirmed"
        return text


def describe_error(exc: BaseException, *, depth: int = 4) -> str:
    """``exc`` and what caused it, on one line, for a log line that must say why.

    ``TriggerError: trigger store write failed <- OperationalError: database or disk is full``:
    the library's error names the operation, its cause the database's own words.
    """
    parts: list[str] = []
    seen: set[int] = set()
    current: BaseException | None = exc
    while current is not None and len(parts) < depth and id(current) not in seen:
        seen.add(id(current))
        text = str(current)
        parts.append(f"{type(current).__name__}: {text}" if text else type(current).__name__)
        current = current.__cause__ or (
            None if current.__suppress_context__ else current.__context__
        )
    return " <- ".join(parts)
