"""Connecting to Temporal: the embedded dev server or an existing cluster (mTLS, API key).

Whoever can talk to the Temporal frontend can start, signal and read recoveries, so a
connection to anything but this host's loopback interface must be authenticated: mTLS
(``temporal.tls``: client certificate and key, the server's CA, its name) or an API key
over TLS. A plaintext connection to another host is refused unless the configuration says
``temporal.allow_plaintext: true`` (for a network you trust for this). docs/security.md
explains the server side.
"""

from __future__ import annotations

import asyncio

from temporalio.client import Client, TLSConfig
from temporalio.contrib.pydantic import pydantic_data_converter
from temporalio.service import RPCError

from resurrect.config import TemporalSettings
from resurrect.errors import ConfigError, ResurrectError
from resurrect.loopback import is_loopback_target


def _tls_config(settings: TemporalSettings) -> TLSConfig | bool:
    tls = settings.tls
    if tls is None:
        return bool(settings.api_key)  # API keys require TLS on Temporal Cloud

    def read(path: object, what: str) -> bytes | None:
        if path is None:
            return None
        try:
            with open(str(path), "rb") as handle:
                return handle.read()
        except OSError as exc:
            raise ConfigError(f"temporal.tls.{what}: cannot read {path}: {exc.strerror}") from exc

    cert = read(tls.client_cert, "client_cert")
    key = read(tls.client_key, "client_key")
    if (cert is None) != (key is None):
        raise ConfigError("temporal.tls: client_cert and client_key must be given together")
    return TLSConfig(
        server_root_ca_cert=read(tls.server_ca, "server_ca"),
        domain=tls.server_name,
        client_cert=cert,
        client_private_key=key,
    )


def _check_authenticated(settings: TemporalSettings, target: str) -> None:
    if settings.tls is not None or settings.api_key or settings.allow_plaintext:
        return
    if not is_loopback_target(target):
        raise ConfigError(
            f"refusing a plaintext, unauthenticated connection to Temporal at {target}:"
            " configure temporal.tls (mTLS) or temporal.api_key, or set"
            " temporal.allow_plaintext: true for a network you trust (see docs/security.md)"
        )


async def connect(
    settings: TemporalSettings, *, address: str | None = None, attempts: int = 1
) -> Client:
    """A client with resurrect's data converter (pydantic models travel as JSON)."""
    target = address or settings.address
    _check_authenticated(settings, target)
    last: Exception | None = None
    for attempt in range(max(1, attempts)):
        try:
            return await Client.connect(
                target,
                namespace=settings.namespace,
                api_key=settings.api_key,
                tls=_tls_config(settings),
                data_converter=pydantic_data_converter,
            )
        except (RPCError, RuntimeError, OSError) as exc:
            last = exc
            if attempt + 1 < attempts:
                await asyncio.sleep(min(2.0, 0.2 * (attempt + 1)))
    raise ResurrectError(f"cannot connect to Temporal at {target}: {last}")
