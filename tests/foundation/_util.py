"""Helpers shared by the foundation tests."""

from __future__ import annotations

import datetime

H = 3_600_000
MIN = 60_000
D = 86_400_000


def z(text: str) -> int:
    """``"2026-03-08T10:30Z"`` (or with seconds/milliseconds) as epoch milliseconds."""
    when = datetime.datetime.fromisoformat(text.replace("Z", "+00:00"))
    assert when.tzinfo is not None
    delta = when - datetime.datetime(1970, 1, 1, tzinfo=datetime.UTC)
    return delta // datetime.timedelta(milliseconds=1)


def z26(text: str) -> int:
    """``"03-08T10:30Z"`` in 2026."""
    return z(f"2026-{text}")
