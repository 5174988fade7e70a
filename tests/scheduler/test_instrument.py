"""The instrumentation seam (``triggers.md`` §16.2-§16.3)."""

from __future__ import annotations

import pytest

from trio_triggers import _instrument


def test_recorder_collects_and_reset_removes_it() -> None:
    recorder = _instrument.install_recorder()
    try:
        _instrument.add_counter(_instrument.FIRES, 1, {"outcome": "launched"})
        _instrument.add_counter(_instrument.FIRES, 1, {"outcome": "skipped"})
        _instrument.record_histogram(_instrument.TICK_DURATION_MS, 12.5)
        opened = _instrument.span("Scheduler.run_once", {"host": "h"})
        with pytest.raises(ValueError, match="boom"), opened:
            raise ValueError("boom")
        assert recorder.counter_total(_instrument.FIRES) == 2
        assert recorder.counter_total(_instrument.FIRES, outcome="launched") == 1
        assert recorder.histogram_samples(_instrument.TICK_DURATION_MS) == [12.5]
        (span,) = recorder.spans_named("Scheduler.run_once")
        assert span.attributes == {"host": "h"}
        assert span.ended
        assert isinstance(span.error, ValueError)
    finally:
        _instrument.reset()
    assert _instrument.recorder() is None
    _instrument.add_counter(_instrument.FIRES, 1, {"outcome": "launched"})
    assert recorder.counter_total(_instrument.FIRES) == 2  # nothing reaches a removed recorder


def test_opentelemetry_api_path_is_a_harmless_noop() -> None:
    _instrument.reset()
    # Without an SDK the OpenTelemetry API's proxies swallow everything; nothing may fail.
    _instrument.add_counter(_instrument.FIRES, 1, {"outcome": "completed"})
    _instrument.record_histogram(_instrument.LAUNCH_DURATION_MS, 3.0, {"trigger_id": "t"})
    with _instrument.span("Scheduler.launch", {"trigger_id": "t", "occurrence": "x"}):
        pass
    assert _instrument.DURATION_BOUNDARIES_MS == (10, 100, 1000, 10000, 60000, 300000)
    _instrument.reset()
