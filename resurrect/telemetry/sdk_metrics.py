"""The Temporal SDK's own metrics on resurrect's endpoint.

The SDK's core keeps its metrics (workflow/activity task latencies, slots, polls, request
failures) outside the OpenTelemetry SDK. With ``telemetry.temporal_sdk_metrics: endpoint``
(the default) its runtime writes them into a buffer that a thread drains every second into
OpenTelemetry instruments of the same names, so they are served on the process's own
Prometheus endpoint and sent over OTLP with resurrect's metrics.
"""

from __future__ import annotations

import logging
import threading
from typing import Any

from opentelemetry import metrics
from temporalio.runtime import (
    BUFFERED_METRIC_KIND_COUNTER,
    BUFFERED_METRIC_KIND_GAUGE,
    MetricBuffer,
    MetricBufferDurationFormat,
)

log = logging.getLogger(__name__)

BUFFER_SIZE = 20_000


def sdk_metric_buffer() -> MetricBuffer:
    return MetricBuffer(BUFFER_SIZE, MetricBufferDurationFormat.SECONDS)


class SdkMetricsForwarder:
    """Copies buffered SDK metric updates into OpenTelemetry instruments."""

    def __init__(self, buffer: MetricBuffer, interval_s: float = 1.0) -> None:
        self.buffer = buffer
        self.interval_s = interval_s
        self.meter = metrics.get_meter("temporalio")
        self._instruments: dict[str, Any] = {}
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="temporal-sdk-metrics", daemon=True)

    def _instrument(self, metric: Any) -> Any:
        found = self._instruments.get(metric.name)
        if found is None:
            unit = metric.unit or ""
            description = metric.description or ""
            if metric.kind == BUFFERED_METRIC_KIND_COUNTER:
                found = self.meter.create_counter(metric.name, unit, description)
            elif metric.kind == BUFFERED_METRIC_KIND_GAUGE:
                found = self.meter.create_gauge(metric.name, unit, description)
            else:
                found = self.meter.create_histogram(metric.name, unit, description)
            self._instruments[metric.name] = found
        return found

    def drain(self) -> int:
        """Forward every update buffered so far; returns how many."""
        updates = self.buffer.retrieve_updates()
        for update in updates:
            metric = update.metric
            instrument = self._instrument(metric)
            attributes = dict(update.attributes)
            if metric.kind == BUFFERED_METRIC_KIND_COUNTER:
                instrument.add(update.value, attributes)
            elif metric.kind == BUFFERED_METRIC_KIND_GAUGE:
                instrument.set(update.value, attributes)
            else:
                instrument.record(update.value, attributes)
        return len(updates)

    def _run(self) -> None:
        while not self._stop.wait(self.interval_s):
            try:
                self.drain()
            except Exception as exc:  # metrics must never take the process down
                log.warning("Temporal SDK metrics not forwarded: %s", exc)

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(timeout=5)
        try:
            self.drain()
        except Exception as exc:
            log.warning("Temporal SDK metrics not forwarded: %s", exc)
