"""resurrect's metrics and traces (OpenTelemetry).

Code everywhere records through :mod:`resurrect.telemetry.metrics` (the OpenTelemetry API:
a no-op until a process sets up a provider); :mod:`resurrect.telemetry.setup` does that at
process start (Prometheus endpoint, OTLP, the Temporal SDK's runtime metrics), and
:mod:`resurrect.telemetry.interceptor` records what recoveries do from the worker's side.
"""
