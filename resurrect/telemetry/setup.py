"""Setting up a process's telemetry: the Prometheus endpoint, OTLP, the Temporal runtime.

Called once, at the start of a long-lived process (``resurrect serve|worker|watch|agent``),
before the first Temporal client connects (the Temporal SDK's runtime is process-wide).
A port that is taken is a warning, not a failure: losing metrics must never stop recovery.
"""

from __future__ import annotations

import logging
import socket
from dataclasses import dataclass, field
from typing import Any

from opentelemetry import metrics, trace
from opentelemetry.sdk.metrics import MeterProvider
from opentelemetry.sdk.metrics.export import MetricReader, PeriodicExportingMetricReader
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import BatchSpanProcessor
from opentelemetry.sdk.trace.sampling import ParentBased, TraceIdRatioBased

from resurrect import __version__
from resurrect.config import OtlpSettings, TelemetrySettings

log = logging.getLogger(__name__)


@dataclass
class Telemetry:
    """What :func:`start_telemetry` started; ``close()`` flushes and stops it."""

    process: str
    prometheus_url: str | None = None
    temporal_sdk_url: str | None = None
    tracing: bool = False
    _closers: list[Any] = field(default_factory=list)

    def close(self) -> None:
        for closer in reversed(self._closers):
            try:
                closer()
            except Exception as exc:  # shutting down: report, never raise
                log.warning("telemetry shutdown: %s", exc)
        self._closers.clear()


def _url(host: str, port: int) -> str:
    shown = "127.0.0.1" if host in ("", "0.0.0.0") else host  # noqa: S104 (a URL to show)
    return f"http://{shown}:{port}/metrics"


def _otlp_kwargs(otlp: OtlpSettings, path: str) -> dict[str, Any]:
    return {
        "endpoint": otlp.endpoint.rstrip("/") + path,
        "headers": dict(otlp.headers) or None,
        "certificate_file": str(otlp.ca_file) if otlp.ca_file else None,
        "client_certificate_file": str(otlp.client_cert) if otlp.client_cert else None,
        "client_key_file": str(otlp.client_key) if otlp.client_key else None,
        "timeout": otlp.timeout_s,
    }


def _prometheus(settings: TelemetrySettings, port: int, handle: Telemetry) -> MetricReader | None:
    from opentelemetry.exporter.prometheus import PrometheusMetricReader
    from prometheus_client import CollectorRegistry, start_http_server

    registry = CollectorRegistry(auto_describe=True)
    try:
        server, thread = start_http_server(port, settings.prometheus_host, registry=registry)
    except OSError as exc:
        log.warning(
            "telemetry: cannot serve metrics on %s:%d (%s); metrics endpoint off",
            settings.prometheus_host,
            port,
            exc.strerror or exc,
        )
        return None
    handle.prometheus_url = _url(settings.prometheus_host, port)

    def stop() -> None:
        server.shutdown()
        server.server_close()
        thread.join(timeout=5)

    handle._closers.append(stop)
    return PrometheusMetricReader(registry=registry)


def _temporal_runtime(settings: TelemetrySettings, handle: Telemetry) -> None:
    """The Temporal SDK's metrics: forwarded into this process's metrics, or on their own
    port. Process-wide: set before the first Temporal client connects."""
    from temporalio.runtime import MetricBuffer, PrometheusConfig, Runtime, TelemetryConfig

    from resurrect.telemetry.sdk_metrics import SdkMetricsForwarder, sdk_metric_buffer

    mode = settings.temporal_sdk_metrics
    if mode == "off":
        return
    sdk: MetricBuffer | PrometheusConfig
    if mode == "endpoint":
        sdk = sdk_metric_buffer()
    else:
        sdk = PrometheusConfig(
            bind_address=f"{settings.prometheus_host}:{settings.temporal_sdk_port}",
            counters_total_suffix=True,
            durations_as_seconds=True,
        )
    try:
        runtime = Runtime(
            telemetry=TelemetryConfig(metrics=sdk, global_tags={"process": handle.process})
        )
        Runtime.set_default(runtime, error_if_already_set=False)
    except Exception as exc:  # the SDK reports a taken port as a generic error
        log.warning("telemetry: Temporal SDK metrics off: %s", exc)
        return
    if isinstance(sdk, MetricBuffer):
        forwarder = SdkMetricsForwarder(sdk)
        forwarder.start()
        handle._closers.append(forwarder.stop)
        handle.temporal_sdk_url = handle.prometheus_url
    else:
        handle.temporal_sdk_url = _url(settings.prometheus_host, settings.temporal_sdk_port)


_STARTED: Telemetry | None = None


def start_telemetry(settings: TelemetrySettings, process: str) -> Telemetry:
    """Metrics and traces for this process (``serve``, ``worker``, ``watch``, ``agent``).

    The OpenTelemetry providers are process-wide and set once: a second call returns the
    first one's handle.
    """
    global _STARTED
    if _STARTED is not None:
        return _STARTED
    handle = Telemetry(process=process)
    _STARTED = handle
    if not settings.enabled:
        return handle
    resource = Resource.create(
        {
            "service.name": f"resurrect-{process}",
            "service.version": __version__,
            "host.name": socket.gethostname(),
        }
    )
    readers: list[MetricReader] = []
    port = settings.port_for(process)
    if port is not None:
        reader = _prometheus(settings, port, handle)
        if reader is not None:
            readers.append(reader)
    otlp = settings.otlp
    if otlp is not None and otlp.metrics:
        from opentelemetry.exporter.otlp.proto.http.metric_exporter import OTLPMetricExporter

        readers.append(
            PeriodicExportingMetricReader(
                OTLPMetricExporter(**_otlp_kwargs(otlp, "/v1/metrics")),
                export_interval_millis=otlp.metrics_interval_s * 1000,
            )
        )
    if readers:
        provider = MeterProvider(metric_readers=readers, resource=resource)
        metrics.set_meter_provider(provider)
        handle._closers.append(provider.shutdown)
    if settings.tracing:
        tracer_provider = TracerProvider(
            resource=resource,
            sampler=ParentBased(TraceIdRatioBased(settings.trace_sample_ratio)),
        )
        if otlp is not None and otlp.traces:
            from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter

            tracer_provider.add_span_processor(
                BatchSpanProcessor(OTLPSpanExporter(**_otlp_kwargs(otlp, "/v1/traces")))
            )
        trace.set_tracer_provider(tracer_provider)
        handle._closers.append(tracer_provider.shutdown)
        handle.tracing = True
    if process in ("serve", "worker"):  # the processes that run a Temporal worker
        _temporal_runtime(settings, handle)
    log.info(
        "telemetry: metrics %s, Temporal SDK metrics %s, tracing %s%s",
        handle.prometheus_url or "off",
        handle.temporal_sdk_url or "off",
        "on" if handle.tracing else "off",
        f" (OTLP {otlp.endpoint})" if otlp else "",
    )
    return handle
