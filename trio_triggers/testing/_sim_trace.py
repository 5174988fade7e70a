"""What a simulated world records: its trace, its tallies and its first violation.

Every line of the trace is stamped with the Trio time since the world began and normalised
(a reservation id becomes ``R<n>@trigger:occurrence``, numbered by first appearance), so the
digest of the whole trace is byte-identical for one seed and configuration; only the last
``tail`` lines are kept, for the :class:`SimulationViolation` message. The first violation is
kept and stops the world (its cancel scope); later ones are ignored.
"""

from __future__ import annotations

import collections
import hashlib
import math
import re
from typing import TYPE_CHECKING, Final

import trio

from ._invariants import Violation

if TYPE_CHECKING:
    from .._clock import WallClock

__all__ = ["Trace"]

_RESERVATION_RE: Final = re.compile(r"trigger-reservation:([^:\s']*):([^:\s']+):(-?\d+)")
#: A manual fire's made-up key (``manual-<uuid4>``, from a fire without a key of its own).
_MANUAL_KEY_RE: Final = re.compile(
    r"manual-[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}"
)


class Trace:
    """The trace (normalised, hashed, its tail kept), the report's ``counts`` and ``checks``,
    and the first :class:`Violation` (``violated``/``fail`` record it and stop the world)."""

    def __init__(self, tail: int, clock: WallClock, counts: collections.Counter[str]) -> None:
        self.clock = clock
        self.t0 = trio.current_time()
        self.counts: collections.Counter[str] = (
            counts if counts is not None else collections.Counter()
        )
        self.checks: collections.Counter[str] = collections.Counter()
        self.hash = hashlib.sha256()
        self.lines = 0
        self.tail: collections.deque[str] = collections.deque(maxlen=tail)
        self.names: dict[str, str] = {}
        self.violation: Violation | None = None
        #: Cancelled on the first violation (the world's scope, once it runs).
        self.stop_scope: trio.CancelScope | None = None

    def norm(self, text: str) -> str:
        """``text`` with every reservation id and made-up manual key replaced by its stable
        short name (their uuids are the one random part of a store)."""

        def repl(m: re.Match[str]) -> str:
            full = m.group(0)
            name = self.names.get(full)
            if name is None:
                name = f"R{len(self.names) + 1}"
                self.names[full] = name
            return f"{name}@{m.group(1)}:{m.group(3)}"

        def manual(m: re.Match[str]) -> str:
            full = m.group(0)
            name = self.names.get(full)
            if name is None:
                name = f"M{len(self.names) + 1}"
                self.names[full] = name
            return name

        return _MANUAL_KEY_RE.sub(manual, _RESERVATION_RE.sub(repl, text))

    def event(self, text: str) -> None:
        """Append one line to the trace."""
        ms = math.floor((trio.current_time() - self.t0) * 1000)
        line = f"{ms:>11} {self.norm(text)}"
        self.hash.update(line.encode())
        self.hash.update(b"\n")
        self.lines += 1
        self.tail.append(line)

    def fail(self, violation: Violation) -> None:
        """Record ``violation`` if it is the first, and stop the world."""
        if self.violation is None:
            self.violation = violation
            self.event(f"VIOLATION {violation.invariant}: {violation.detail}")
            if self.stop_scope is not None:
                self.stop_scope.cancel()

    def violated(self, invariant: str, detail: str) -> None:
        """:meth:`fail` with a violation seen now (wall time of the world's clock)."""
        self.fail(
            Violation(invariant=invariant, at_ms=self.clock.now_ms(), detail=self.norm(detail))
        )
