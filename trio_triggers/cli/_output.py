"""Output helpers of the CLI: exact instants, tables and JSON (human time is ``_time``)."""

from __future__ import annotations

import datetime
import sys
from typing import TYPE_CHECKING, Any, TextIO

import msgspec

if TYPE_CHECKING:
    from collections.abc import Sequence

__all__ = [
    "format_instant",
    "print_json",
    "render_table",
]


def format_instant(ms: int | None) -> str:
    """An epoch-ms instant as ``YYYY-MM-DD HH:MM:SS`` UTC with a ``Z`` (``-`` for ``None``).

    The exact, zone-free form tables and logs line up on; wall times in a trigger's zone and
    "in 3 minutes" are :mod:`trio_triggers.cli._time`'s (pendulum).
    """
    if ms is None:
        return "-"
    instant = datetime.datetime.fromtimestamp(ms / 1000, tz=datetime.UTC)
    return instant.strftime("%Y-%m-%d %H:%M:%S") + "Z"


def render_table(headers: Sequence[str], rows: Sequence[Sequence[str]]) -> str:
    """A plain aligned text table (no borders), one line per row."""
    widths = [len(h) for h in headers]
    for row in rows:
        for i, cell in enumerate(row):
            widths[i] = max(widths[i], len(cell))
    lines = ["  ".join(h.ljust(widths[i]) for i, h in enumerate(headers)).rstrip()]
    lines.append("  ".join("-" * w for w in widths))
    lines.extend(
        "  ".join(cell.ljust(widths[i]) for i, cell in enumerate(row)).rstrip() for row in rows
    )
    return "\n".join(lines)


def print_json(value: Any, out: TextIO | None = None) -> None:
    """Print ``value`` as one JSON document (msgspec structs included) and a newline."""
    stream = out if out is not None else sys.stdout
    stream.write(msgspec.json.encode(value).decode() + "\n")
