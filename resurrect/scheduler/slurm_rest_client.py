"""HTTP to ``slurmrestd``: the token, bounded answers, retries and the error mapping.

:class:`RestClient` sends one request at a time over TCP (``http://host:port``) or a unix
socket (``unix:/path``) with the ``auth/jwt`` headers, reads at most ``max_body_bytes`` of
the answer, and turns every failure into the same :mod:`resurrect.errors` types a failed
``scontrol`` gives (Slurm's own error text is mapped by
:func:`~resurrect.scheduler.slurm_exec.classify_text`):

* connection refused or reset (a restarted ``slurmrestd``): retried a few times within the
  request timeout, then SchedulerUnavailable;
* a rejected token (the token expired or was rotated: HTTP 401, or slurmctld's "Protocol
  authentication error" that slurmrestd passes on as HTTP 511): the token file is read again
  and the request sent once more, then SchedulerUnavailable naming the file;
* an answer whose ``errors`` (or, for requeue and cancel, per-job ``status``) name a Slurm
  error (no such job, refused, controller down): that error's type; any other 5xx:
  SchedulerUnavailable; any other 4xx: SchedulerError.

:meth:`RestClient.connect` chooses the data-parser version: the newest of
:data:`KNOWN_DATA_PARSERS` the server answers ``/slurm/<version>/ping/`` for.

The token is slurmctld's trust in resurrect (often root's): whoever holds it may drain,
cancel and requeue anything. So it goes in clear text only to this host's loopback interface
or a unix socket, unless ``allow_plaintext`` says the network is trusted
(:func:`~resurrect.loopback.cleartext_refusal`); ``https://`` verifies the server with the
system's CAs or a private CA and may present a client certificate (:func:`tls_context`).
The token file is read only when private (a regular file, no link followed, owned by root
or this user, mode 0600/0400: :mod:`resurrect.secret_file`), and the token is never part of
an error, a log record or a repr: an error text that would hold it (slurmrestd quoting a
request) has it replaced.
"""

from __future__ import annotations

import asyncio
import json
import logging
import os
import ssl
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import httpx
from pydantic import SecretStr

from resurrect.errors import ConfigError, SchedulerError, SchedulerUnavailable
from resurrect.loopback import cleartext_refusal, is_loopback_host
from resurrect.scheduler.slurm_exec import classify_text
from resurrect.secret_file import read_key
from resurrect.telemetry.record import record_command

log = logging.getLogger(__name__)

# Data parsers whose answers resurrect.scheduler.slurm_json reads, newest first (Slurm 24.11
# serves v0.0.40-42, 26.05 v0.0.42-45).
KNOWN_DATA_PARSERS = ("v0.0.45", "v0.0.44", "v0.0.43", "v0.0.42")
# A token file larger than this is not a token.
TOKEN_MAX_BYTES = 16 * 1024
# Attempts for a request that did not reach slurmrestd (connection refused or reset).
CONNECT_ATTEMPTS = 4
RETRY_DELAY_S = 0.25
_UNIX = "unix:"
# slurmrestd's answer to ``GET nodes/?update_time=T`` when no node changed since T
NOT_MODIFIED = 304
# slurmctld's ESLURM_PROTOCOL_AUTHENTICATION_ERROR: the token was not accepted
_AUTH_ERROR = 1007


@dataclass(frozen=True)
class RestAnswer:
    """One parsed answer: HTTP status and the JSON document."""

    status: int
    doc: dict[str, Any]
    size: int = 0


REDACTED = "<slurmrestd token>"


class TokenFile:
    """The JWT in a file (``scontrol token`` output, with or without ``SLURM_JWT=``), read
    again whenever the file changes, and only while the file is private
    (:func:`resurrect.secret_file.read_key`: else ConfigError). A missing file (being
    renewed) is SchedulerUnavailable."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self._stamp: tuple[int, int, int] | None = None
        self._token = SecretStr("")

    def __repr__(self) -> str:
        return f"TokenFile({str(self.path)!r})"

    def get(self, *, fresh: bool = False) -> str:
        """The token; re-read when the file's inode, mtime or size changed (or ``fresh``)."""
        try:
            st = os.lstat(self.path)
        except OSError as exc:
            raise SchedulerUnavailable(
                f"cannot read slurmrestd token {self.path}: {exc.strerror}"
            ) from None
        stamp = (st.st_ino, st.st_mtime_ns, st.st_size)
        if fresh or stamp != self._stamp:
            raw = read_key(
                self.path, "slurmrestd token file", min_bytes=0, max_bytes=TOKEN_MAX_BYTES
            )
            text = raw.decode("ascii", "replace").removeprefix("SLURM_JWT=").strip()
            self._token = SecretStr(text)
            self._stamp = stamp
        token = self._token.get_secret_value()
        if not token or not token.isascii() or not token.isprintable() or " " in token:
            raise SchedulerUnavailable(f"slurmrestd token file {self.path} holds no token")
        return token

    def safe_cause(self, exc: BaseException) -> BaseException | None:
        """``exc`` to chain to an error, or None when its text quotes the token."""
        token = self._token.get_secret_value()
        return None if token and token in str(exc) else exc

    def redact(self, text: str) -> str:
        """``text`` with the token (if it holds it) replaced by :data:`REDACTED`."""
        token = self._token.get_secret_value()
        return text.replace(token, REDACTED) if token and token in text else text


def tls_context(
    *,
    ca_file: Path | None = None,
    client_cert: Path | None = None,
    client_key: Path | None = None,
) -> ssl.SSLContext:
    """The TLS settings of an ``https://`` slurmrestd: its server verified with the
    system's CAs or ``ca_file``, and a client certificate (with its key) when given."""
    if (client_cert is None) != (client_key is None):
        raise ConfigError("slurmrestd tls: client_cert and client_key must be given together")
    try:
        context = ssl.create_default_context(cafile=str(ca_file) if ca_file else None)
        if client_cert is not None and client_key is not None:
            context.load_cert_chain(str(client_cert), str(client_key))
    except (OSError, ssl.SSLError) as exc:
        raise ConfigError(f"slurmrestd tls: {exc}") from None
    return context


def slurm_errors(doc: dict[str, Any]) -> list[str]:
    """The ``errors`` of a slurmrestd answer as text (description and error name), and
    the failed per-job ``status`` entries of a requeue or cancel answer."""
    out = []
    for err in doc.get("errors") or []:
        if isinstance(err, dict):
            parts = [str(err.get(k)) for k in ("description", "error") if err.get(k)]
            out.append(": ".join(parts) or json.dumps(err)[:200])
        else:
            out.append(str(err)[:200])
    for status in doc.get("status") or []:
        error = status.get("error") if isinstance(status, dict) else None
        if isinstance(error, dict) and error.get("code") not in (None, 0):
            job = status.get("step_id") or "?"
            out.append(f"job {job}: {error.get('message') or error.get('string')}"[:300])
    return out


def token_rejected(answer: RestAnswer) -> bool:
    """The answer says the token was not accepted (expired, or another key's)."""
    if answer.status == 401:
        return True
    errors = answer.doc.get("errors") or []
    return any(isinstance(e, dict) and e.get("error_number") == _AUTH_ERROR for e in errors)


def error_for(status: int, doc: dict[str, Any], context: str) -> SchedulerError | None:
    """The resurrect error for an answer, or None when it is a success."""
    errors = slurm_errors(doc)
    if status < 300 and not errors:
        return None
    text = "; ".join(errors) or f"HTTP {status}"
    mapped = classify_text(text, f"{context}: HTTP {status}: ")
    if type(mapped) is not SchedulerError:
        return mapped
    if status >= 500 or status in (408, 429):
        return SchedulerUnavailable(str(mapped))
    return mapped


class RestClient:
    """Requests to one slurmrestd as the user of a token file.

    Args:
        url: ``http://host:port`` or ``unix:/path/to/socket``.
        token_file: the JWT (``scontrol token username=U lifespan=S``).
        user: sent as ``X-SLURM-USER-NAME`` (None: the token's own user).
        timeout: seconds one request may take, retries included.
        max_body_bytes: answers longer than this are refused (SchedulerError).
        transport: the HTTP transport (None: TCP or the unix socket of ``url``).
        allow_plaintext: send the token over ``http://`` to another host (a trusted network).
        tls: the server's CA and a client certificate for ``https://`` (None: system CAs).

    Raises:
        ConfigError: ``url`` is ``http://`` to another host and ``allow_plaintext`` is off.
    """

    def __init__(
        self,
        url: str,
        token_file: Path,
        *,
        user: str | None = None,
        timeout: float = 30.0,
        max_body_bytes: int = 256 * 1024 * 1024,
        transport: httpx.AsyncBaseTransport | None = None,
        allow_plaintext: bool = False,
        tls: ssl.SSLContext | None = None,
    ) -> None:
        refusal = cleartext_refusal(
            url,
            what="the slurmrestd token",
            allow_setting="cluster.slurmrestd_allow_plaintext",
            allow_plaintext=allow_plaintext,
        )
        if refusal is not None:
            raise ConfigError(refusal)
        if (
            url.startswith("http://")
            and allow_plaintext
            and not is_loopback_host(urlsplit(url).hostname or "")
        ):
            log.warning("slurmrestd token sent in clear text to %s (allow_plaintext is set)", url)
        self.url = url
        self._tls = tls
        self.token = TokenFile(token_file)
        self.user = user
        self.timeout = timeout
        self.max_body_bytes = max_body_bytes
        self.data_parser: str | None = None
        self._transport = transport
        self._client: httpx.AsyncClient | None = None
        self._lock: asyncio.Lock | None = None

    def _http(self) -> httpx.AsyncClient:
        if self._client is None:
            transport = self._transport
            if self.url.startswith(_UNIX):
                transport = transport or httpx.AsyncHTTPTransport(uds=self.url[len(_UNIX) :])
                base = "http://slurmrestd"
            elif self.url.startswith("https://"):
                transport = transport or httpx.AsyncHTTPTransport(verify=self._tls or True)
                base = self.url.rstrip("/")
            elif self.url.startswith("http://"):
                transport = transport or httpx.AsyncHTTPTransport()
                base = self.url.rstrip("/")
            else:
                raise ConfigError(f"slurmrestd url must be http(s)://... or unix:/path: {self.url}")
            self._client = httpx.AsyncClient(
                transport=transport, base_url=base, timeout=self.timeout, trust_env=False
            )
        return self._client

    async def aclose(self) -> None:
        if self._client is not None:
            await self._client.aclose()
            self._client = None

    def _headers(self, *, fresh: bool = False) -> dict[str, str]:
        headers = {"X-SLURM-USER-TOKEN": self.token.get(fresh=fresh)}
        if self.user:
            headers["X-SLURM-USER-NAME"] = self.user
        return headers

    async def _once(
        self, method: str, path: str, body: dict[str, Any] | None, headers: dict[str, str]
    ) -> RestAnswer:
        request = self._http().build_request(method, path, json=body, headers=headers)
        response = await self._http().send(request, stream=True)
        try:
            chunks: list[bytes] = []
            size = 0
            async for chunk in response.aiter_bytes():
                size += len(chunk)
                if size > self.max_body_bytes:
                    raise SchedulerError(
                        f"slurmrestd {method} {path}: answer larger than {self.max_body_bytes} B"
                    )
                chunks.append(chunk)
        finally:
            await response.aclose()
        raw = b"".join(chunks)
        try:
            doc = json.loads(raw) if raw.strip() else {}
        except (json.JSONDecodeError, UnicodeDecodeError):
            doc = {"errors": [{"description": raw[:300].decode("utf-8", "replace")}]}
        if not isinstance(doc, dict):
            doc = {"errors": [{"description": f"answer is a JSON {type(doc).__name__}"}]}
        return RestAnswer(response.status_code, doc, len(raw))

    async def request(
        self, method: str, path: str, body: dict[str, Any] | None = None
    ) -> dict[str, Any]:
        """The JSON answer of ``method path`` (``path`` below the data parser, e.g.
        ``jobs/``); raises the mapped SchedulerError on any failure."""
        version = await self.connect()
        return await self.raw_request(method, f"/slurm/{version}/{path}", body)

    async def request_changed(self, path: str, since: int) -> dict[str, Any] | None:
        """The JSON answer of ``GET path?update_time=since``, or None when slurmctld says
        nothing changed since ``since`` (HTTP 304, as ``nodes/`` answers). slurmctld keeps
        one change time per kind (all jobs, all nodes): any change gives the whole list."""
        version = await self.connect()
        full = f"/slurm/{version}/{path}?update_time={int(since)}"
        answer = await self._send("GET", full, None)
        if answer.status == NOT_MODIFIED:
            return None
        error = error_for(answer.status, answer.doc, f"slurmrestd GET {full}")
        if error is not None:
            raise self.redacted(error)
        return answer.doc

    async def raw_request(
        self, method: str, path: str, body: dict[str, Any] | None = None
    ) -> dict[str, Any]:
        """Like :meth:`request`, for a full path (no data-parser choice first)."""
        answer = await self._send(method, path, body)
        error = error_for(answer.status, answer.doc, f"slurmrestd {method} {path}")
        if error is not None:
            raise self.redacted(error)
        return answer.doc

    async def _send(self, method: str, path: str, body: dict[str, Any] | None) -> RestAnswer:
        started = time.monotonic()
        deadline = started + self.timeout
        renewed = False
        attempt = 0
        while True:
            attempt += 1
            try:
                answer = await asyncio.wait_for(
                    self._once(method, path, body, self._headers(fresh=renewed)),
                    timeout=max(0.1, deadline - time.monotonic()),
                )
            except (httpx.ConnectError, httpx.RemoteProtocolError) as exc:
                # not answered (slurmrestd restarting, or a kept-alive connection it closed):
                # sent again, also a POST: every action is checked and verified around it
                await self.aclose()
                if attempt >= CONNECT_ATTEMPTS or time.monotonic() + RETRY_DELAY_S > deadline:
                    raise SchedulerUnavailable(
                        self.token.redact(
                            f"slurmrestd {self.url} {method} {path}: {type(exc).__name__}: {exc}"
                        )
                    ) from self.token.safe_cause(exc)
                await asyncio.sleep(RETRY_DELAY_S * attempt)
                continue
            except (TimeoutError, httpx.TimeoutException) as exc:
                raise SchedulerUnavailable(
                    f"slurmrestd {self.url} {method} {path}: no answer within {self.timeout} s"
                ) from self.token.safe_cause(exc)
            except (httpx.HTTPError, ssl.SSLError) as exc:
                # (a TLS 1.3 server refuses a client without a certificate after the handshake:
                # the alert can surface from the read as the ssl module's own error)
                raise SchedulerUnavailable(
                    self.token.redact(
                        f"slurmrestd {self.url} {method} {path}: {type(exc).__name__}: {exc}"
                    )
                ) from self.token.safe_cause(exc)
            rejected = token_rejected(answer)
            if rejected and not renewed:
                renewed = True  # the token may have been renewed in its file meanwhile
                continue
            record_command(f"slurmrestd {method}", time.monotonic() - started, answer.size)
            if rejected:
                raise SchedulerUnavailable(
                    f"slurmrestd {method} {path}: HTTP {answer.status}: token rejected (expired "
                    f"or not signed with the cluster's jwt key): renew {self.token.path}"
                )
            return answer

    def redacted(self, error: SchedulerError) -> SchedulerError:
        """``error``, or one of its type without the token where its text quotes it."""
        text = str(error)
        clean = self.token.redact(text)
        return error if clean == text else type(error)(clean)

    async def connect(self) -> str:
        """The data parser to use: the newest of KNOWN_DATA_PARSERS this slurmrestd serves
        (asked once, by ``ping``)."""
        if self.data_parser is not None:
            return self.data_parser
        if self._lock is None:
            self._lock = asyncio.Lock()
        async with self._lock:
            if self.data_parser is None:
                self.data_parser = await self._choose_data_parser()
        return self.data_parser

    async def _choose_data_parser(self) -> str:
        for version in KNOWN_DATA_PARSERS:
            answer = await self._send("GET", f"/slurm/{version}/ping/", None)
            if answer.status == 404:
                continue  # this slurmrestd does not serve that version
            error = error_for(answer.status, answer.doc, f"slurmrestd ping {version}")
            if error is not None:
                raise self.redacted(error)
            return version
        raise SchedulerError(
            f"slurmrestd {self.url} serves none of the data parsers {', '.join(KNOWN_DATA_PARSERS)}"
        )
