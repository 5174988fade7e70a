"""The metrics and spans seam (``triggers.md`` §16.2-§16.3).

Library code reports through three functions: :func:`add_counter`, :func:`record_histogram`
and :func:`span`. Where they go is decided by the *backend*:

* a :class:`Recorder` installed with :func:`install_recorder` (tests) receives everything;
* otherwise the OpenTelemetry API when it is importable (the ``otel`` extra): counters and
  histograms from ``metrics.get_meter("trio_triggers")``, spans from
  ``trace.get_tracer("trio_triggers")``. Without a configured SDK these are OpenTelemetry's own
  no-ops, so the cost is a few attribute lookups;
* otherwise nothing at all.

The only global state is the installed recorder, and :func:`reset` removes it, so a test can
always return the process to its initial state.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any

from ._constants import DURATION_BOUNDARIES_MS

__all__ = [
    "DURATION_BOUNDARIES_MS",
    "FIRES",
    "LAUNCH_DURATION_MS",
    "MISSED",
    "TICK_DURATION_MS",
    "RecordedSpan",
    "Recorder",
    "add_counter",
    "install_recorder",
    "record_histogram",
    "recorder",
    "reset",
    "span",
]

FIRES = "trio_triggers.fires"
#: Occurrences that will never run, by ``reason`` (``overlap``, ``catch_up``, ``catch_up_bound``,
#: ``paused``) and ``trigger_id``: added by the store once the transaction that decided their
#: fate has committed (docs/operations.md, "Occurrences that do not run").
MISSED = "trio_triggers.missed"
TICK_DURATION_MS = "trio_triggers.tick_duration_ms"
LAUNCH_DURATION_MS = "trio_triggers.launch_duration_ms"

Attributes = Mapping[str, str | int | float | bool]

_UNITS = {FIRES: "1", MISSED: "1", TICK_DURATION_MS: "ms", LAUNCH_DURATION_MS: "ms"}
_DESCRIPTIONS = {
    FIRES: "Results recorded by the scheduler, by outcome",
    MISSED: "Occurrences that will not run, by reason and trigger",
    TICK_DURATION_MS: "Duration of one scheduler tick",
    LAUNCH_DURATION_MS: "Duration of one runner.start call",
}


@dataclass
class RecordedSpan:
    """One span as a :class:`Recorder` saw it."""

    name: str
    attributes: dict[str, Any]
    error: BaseException | None = None
    ended: bool = False


@dataclass
class Recorder:
    """Collects every measurement and span in memory, for tests."""

    counters: list[tuple[str, int, dict[str, Any]]] = field(default_factory=list)
    histograms: list[tuple[str, float, dict[str, Any]]] = field(default_factory=list)
    spans: list[RecordedSpan] = field(default_factory=list)

    def counter_total(self, name: str, **attributes: Any) -> int:
        """Sum of the counter ``name`` over the samples whose attributes include these."""
        return sum(
            value
            for n, value, attrs in self.counters
            if n == name and all(attrs.get(k) == v for k, v in attributes.items())
        )

    def histogram_samples(self, name: str) -> list[float]:
        return [value for n, value, _ in self.histograms if n == name]

    def spans_named(self, name: str) -> list[RecordedSpan]:
        return [s for s in self.spans if s.name == name]

    def clear(self) -> None:
        self.counters.clear()
        self.histograms.clear()
        self.spans.clear()


_recorder: Recorder | None = None
_otel: _Otel | None = None
_otel_checked = False


class _Otel:
    """Lazily created OpenTelemetry instruments (the API's proxies follow a later SDK setup)."""

    def __init__(self) -> None:
        from opentelemetry import metrics, trace

        self._trace = trace
        self._idle_providers = (trace.ProxyTracerProvider, trace.NoOpTracerProvider)
        self._meter = metrics.get_meter("trio_triggers")
        self.tracer = trace.get_tracer("trio_triggers")
        self._counters: dict[str, Any] = {}
        self._histograms: dict[str, Any] = {}

    def tracing(self) -> bool:
        """Whether an SDK tracer provider is installed (without one, spans are skipped)."""
        return not isinstance(self._trace.get_tracer_provider(), self._idle_providers)

    def counter(self, name: str) -> Any:
        instrument = self._counters.get(name)
        if instrument is None:
            instrument = self._meter.create_counter(
                name, unit=_UNITS.get(name, "1"), description=_DESCRIPTIONS.get(name, "")
            )
            self._counters[name] = instrument
        return instrument

    def histogram(self, name: str) -> Any:
        instrument = self._histograms.get(name)
        if instrument is None:
            instrument = self._meter.create_histogram(
                name,
                unit=_UNITS.get(name, "ms"),
                description=_DESCRIPTIONS.get(name, ""),
                explicit_bucket_boundaries_advisory=[float(b) for b in DURATION_BOUNDARIES_MS],
            )
            self._histograms[name] = instrument
        return instrument


def _otel_backend() -> _Otel | None:
    global _otel, _otel_checked
    if not _otel_checked:
        _otel_checked = True
        try:
            _otel = _Otel()
        except ImportError:
            _otel = None
    return _otel


def install_recorder(new: Recorder | None = None) -> Recorder:
    """Route every measurement and span to ``new`` (a fresh :class:`Recorder` by default)."""
    global _recorder
    _recorder = new if new is not None else Recorder()
    return _recorder


def recorder() -> Recorder | None:
    """The installed recorder, if any."""
    return _recorder


def reset() -> None:
    """Remove the installed recorder and forget the OpenTelemetry instruments."""
    global _recorder, _otel, _otel_checked
    _recorder = None
    _otel = None
    _otel_checked = False


def add_counter(name: str, value: int = 1, attributes: Attributes | None = None) -> None:
    attrs = dict(attributes or {})
    if _recorder is not None:
        _recorder.counters.append((name, value, attrs))
        return
    otel = _otel_backend()
    if otel is not None:
        otel.counter(name).add(value, attributes=attrs)


def record_histogram(name: str, value: float, attributes: Attributes | None = None) -> None:
    attrs = dict(attributes or {})
    if _recorder is not None:
        _recorder.histograms.append((name, value, attrs))
        return
    otel = _otel_backend()
    if otel is not None:
        otel.histogram(name).record(value, attributes=attrs)


@contextlib.contextmanager
def span(name: str, attributes: Attributes | None = None) -> Iterator[None]:
    """A span around the block; the block's exception (if any) propagates unchanged."""
    attrs = dict(attributes or {})
    rec = _recorder
    if rec is not None:
        recorded = RecordedSpan(name=name, attributes=attrs)
        rec.spans.append(recorded)
        try:
            yield
        except BaseException as exc:
            recorded.error = exc
            raise
        finally:
            recorded.ended = True
        return
    otel = _otel_backend()
    if otel is None or not otel.tracing():
        yield
        return
    with otel.tracer.start_as_current_span(name, attributes=attrs):
        yield
