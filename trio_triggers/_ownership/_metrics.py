"""The ownership counters, reported through the library's metrics hook (``_instrument``)."""

from __future__ import annotations

from collections.abc import Mapping

from .. import _instrument

__all__ = ["add_counter"]


def add_counter(name: str, value: int, attributes: Mapping[str, str]) -> None:
    """Add ``value`` to the counter ``name`` (a no-op unless a metrics backend is installed)."""
    _instrument.add_counter(name, value, attributes)
