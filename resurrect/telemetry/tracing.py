"""Traces of recoveries: Temporal's OpenTelemetry interceptor on resurrect's clients.

A client with the interceptor carries the current span's context into every workflow it
starts or signals, and a worker built from it opens a span per workflow run and per
activity, so one recovery is one trace from the sensor's ``report`` span on.
"""

from __future__ import annotations

from temporalio.client import Client
from temporalio.contrib.opentelemetry import TracingInterceptor

from resurrect.config import TelemetrySettings


def with_tracing(client: Client, settings: TelemetrySettings) -> Client:
    """``client``, or a copy of it with the tracing interceptor (once) when tracing is on."""
    if not (settings.enabled and settings.tracing):
        return client
    config = client.config()
    interceptors = list(config.get("interceptors") or [])
    if any(isinstance(i, TracingInterceptor) for i in interceptors):
        return client
    config["interceptors"] = [*interceptors, TracingInterceptor()]
    return Client(**config)
