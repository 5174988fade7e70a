"""Output helpers of the CLI: instants, durations, tables and JSON."""

from __future__ import annotations

import datetime
import re
import sys
from collections.abc import Sequence
from typing import Any, TextIO

import msgspec

__all__ = [
    "format_instant",
    "parse_duration",
    "print_json",
    "render_table",
]

_UNITS = {"ms": 0.001, "s": 1.0, "m": 60.0, "h": 3600.0, "d": 86400.0, "w": 604800.0}
_DURATION = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*(ms|s|m|h|d|w)?\s*$")


def parse_duration(text: str) -> float:
    """``"30d"``, ``"12h"``, ``"90s"``, ``"1.5m"``, ``"250ms"`` or plain seconds -> seconds."""
    match = _DURATION.match(text)
    if match is None:
        raise ValueError(f"not a duration: {text!r} (use e.g. 30s, 5m, 12h, 30d)")
    value = float(match.group(1)) * _UNITS[match.group(2) or "s"]
    if value <= 0:
        raise ValueError(f"duration must be positive: {text!r}")
    return value


def format_instant(ms: int | None, tz: datetime.tzinfo | None = None) -> str:
    """An epoch-ms instant as ``YYYY-MM-DD HH:MM:SS`` plus zone (UTC ``Z`` by default)."""
    if ms is None:
        return "-"
    instant = datetime.datetime.fromtimestamp(ms / 1000, tz=datetime.UTC)
    if tz is None:
        return instant.strftime("%Y-%m-%d %H:%M:%S") + "Z"
    local = instant.astimezone(tz)
    return local.strftime("%Y-%m-%d %H:%M:%S %Z")


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
