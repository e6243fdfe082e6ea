"""One process-wide telemetry setup for the tests (OpenTelemetry providers are set once).

Metrics go to an in-memory reader (for assertions) and to a Prometheus endpoint on a free
port (for the real Prometheus server and the dashboard check); spans to an in-memory
exporter.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from opentelemetry import metrics, trace
from opentelemetry.exporter.prometheus import PrometheusMetricReader
from opentelemetry.sdk.metrics import MeterProvider
from opentelemetry.sdk.metrics.export import InMemoryMetricReader
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from prometheus_client import CollectorRegistry, start_http_server

from resurrect.temporal.server import free_port


@dataclass
class SharedTelemetry:
    memory: InMemoryMetricReader
    spans: InMemorySpanExporter
    metrics_url: str
    port: int

    def points(self, name: str) -> list[Any]:
        """Every data point of metric ``name`` recorded so far (cumulative)."""
        data = self.memory.get_metrics_data()
        found: list[Any] = []
        for resource in data.resource_metrics if data else []:
            for scope in resource.scope_metrics:
                for metric in scope.metrics:
                    if metric.name == name:
                        found.extend(metric.data.data_points)
        return found


_SESSION: SharedTelemetry | None = None


def shared_telemetry() -> SharedTelemetry:
    global _SESSION
    if _SESSION is None:
        registry = CollectorRegistry(auto_describe=True)
        port = free_port()
        start_http_server(port, "127.0.0.1", registry=registry)
        memory = InMemoryMetricReader()
        metrics.set_meter_provider(
            MeterProvider(metric_readers=[memory, PrometheusMetricReader(registry=registry)])
        )
        spans = InMemorySpanExporter()
        tracer_provider = TracerProvider()
        tracer_provider.add_span_processor(SimpleSpanProcessor(spans))
        trace.set_tracer_provider(tracer_provider)
        _SESSION = SharedTelemetry(
            memory=memory, spans=spans, metrics_url=f"http://127.0.0.1:{port}/metrics", port=port
        )
    return _SESSION
