"""The slurmrestd token stays secret: it never crosses a network in clear text unless the
configuration says the network is trusted, https verifies the server (a private CA, a
client certificate), the token file is read only when private, and the token is in no
exception, log record, note, metric, span or repr, whatever fails."""

from __future__ import annotations

import asyncio
import ipaddress
import json
import logging
import os
import ssl
import subprocess
import tempfile
import threading
import traceback
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import httpx
import pytest
from hypothesis import assume, given, settings
from hypothesis import strategies as st
from pydantic import ValidationError
from support.telemetry import shared_telemetry

from resurrect.config import ClusterSettings, ResurrectConfig
from resurrect.errors import ConfigError, SchedulerError
from resurrect.job_notes import JobNotes
from resurrect.loopback import cleartext_refusal
from resurrect.scheduler import slurm_json, slurm_rest
from resurrect.scheduler.factory import scheduler_for
from resurrect.scheduler.slurm_exec import CommandRunner
from resurrect.scheduler.slurm_rest import SlurmRest
from resurrect.scheduler.slurm_rest_client import REDACTED, RestClient, tls_context

TOKEN = "eyJhbGciOiJIUzI1NiJ9.eyJzdW4iOiJyb290In0.SeCrEtSiGnAtUrE-4f2a9c"


def private_token(tmp_path: Path, token: str = TOKEN, mode: int = 0o600) -> Path:
    path = tmp_path / "token"
    path.write_text(f"SLURM_JWT={token}\n")
    path.chmod(mode)
    return path


# ------------------------------------------------------------------ clear text
@pytest.mark.parametrize(
    "url",
    [
        "http://10.1.2.3:6820",
        "http://slurmctl:6820",
        "http://slurmctl.cluster.example",
        "http://[fe80::1]:6820",
        "http://0.0.0.0:6820",
        "http://127.0.0.1.nip.io:6820",
        "http://localhost.example:6820",
        "http://user@10.1.2.3:6820/",
    ],
)
def test_clear_text_to_another_host_is_refused_and_says_why(url: str, tmp_path: Path) -> None:
    token = private_token(tmp_path)
    with pytest.raises(ValidationError, match=r"clear text.*slurmrestd_allow_plaintext"):
        ClusterSettings(scheduler="slurmrestd", slurmrestd_url=url, slurmrestd_token_file=token)
    with pytest.raises(ConfigError, match="anyone on the network path could read it"):
        RestClient(url, token)
    allowed = ClusterSettings(
        scheduler="slurmrestd",
        slurmrestd_url=url,
        slurmrestd_token_file=token,
        slurmrestd_allow_plaintext=True,
    )
    assert allowed.slurmrestd_allow_plaintext
    RestClient(url, token, allow_plaintext=True)


@pytest.mark.parametrize(
    "url",
    [
        "http://127.0.0.1:6820",
        "http://127.8.9.10:6820",
        "http://localhost:6820",
        "http://[::1]:6820",
        "unix:/run/slurmrestd/slurmrestd.socket",
        "https://slurmctl:6820",
        "https://10.1.2.3:6820",
    ],
)
def test_loopback_unix_sockets_and_https_need_no_setting(url: str, tmp_path: Path) -> None:
    token = private_token(tmp_path)
    ClusterSettings(scheduler="slurmrestd", slurmrestd_url=url, slurmrestd_token_file=token)
    RestClient(url, token)


def test_tls_settings_need_https(tmp_path: Path) -> None:
    with pytest.raises(ValidationError, match="needs an https"):
        ClusterSettings(
            scheduler="slurmrestd",
            slurmrestd_url="unix:/run/slurmrestd.sock",
            slurmrestd_token_file=private_token(tmp_path),
            slurmrestd_tls={"server_ca": str(tmp_path / "ca.pem")},
        )
    with pytest.raises(ConfigError, match="together"):
        tls_context(client_cert=tmp_path / "c.pem")
    with pytest.raises(ConfigError, match="slurmrestd tls"):
        tls_context(ca_file=tmp_path / "missing-ca.pem")


# ------------------------------------------------------------------ the token file
def read_token(path: Path) -> str:
    return RestClient("unix:/nonexistent", path).token.get()


def test_a_private_token_file_is_read(tmp_path: Path) -> None:
    assert read_token(private_token(tmp_path)) == TOKEN
    assert read_token(private_token(tmp_path, mode=0o400)) == TOKEN


@pytest.mark.parametrize("mode", [0o644, 0o640, 0o604, 0o660, 0o666, 0o620])
def test_a_token_file_others_may_read_or_change_is_refused(tmp_path: Path, mode: int) -> None:
    with pytest.raises(ConfigError, match="chmod 600"):
        read_token(private_token(tmp_path, mode=mode))


def test_a_token_file_behind_a_link_is_refused(tmp_path: Path) -> None:
    real = private_token(tmp_path)
    link = tmp_path / "link"
    link.symlink_to(real)
    with pytest.raises(ConfigError, match="slurmrestd token file"):
        read_token(link)
    fifo = tmp_path / "fifo"
    os.mkfifo(fifo, 0o600)
    with pytest.raises(ConfigError, match="not a regular file"):
        read_token(fifo)


@pytest.mark.skipif(os.geteuid() != 0, reason="chown needs root")
def test_a_token_file_of_another_user_is_refused(tmp_path: Path) -> None:
    path = private_token(tmp_path)
    os.chown(path, 65534, 65534)
    with pytest.raises(ConfigError, match="owned by uid 65534"):
        read_token(path)


def test_a_token_file_made_public_later_is_refused_at_the_next_read(tmp_path: Path) -> None:
    path = private_token(tmp_path)
    client = RestClient("unix:/nonexistent", path)
    assert client.token.get() == TOKEN
    path.chmod(0o644)
    os.utime(path, ns=(1, 1))  # changed: read again
    with pytest.raises(ConfigError):
        client.token.get()


# ------------------------------------------------------------------ https
def openssl(*args: str, cwd: Path) -> None:
    subprocess.run(["openssl", *args], cwd=cwd, check=True, capture_output=True, timeout=60)


@pytest.fixture(scope="module")
def pki(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A private CA, a server certificate for 127.0.0.1 and a client certificate."""
    where = tmp_path_factory.mktemp("pki")
    openssl("req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "2", "-subj", "/CN=ca",
            "-keyout", "ca.key", "-out", "ca.pem", cwd=where)  # fmt: skip
    for name, ext in (("server", "subjectAltName=IP:127.0.0.1"), ("client", "")):
        openssl("req", "-newkey", "rsa:2048", "-nodes", "-subj", f"/CN={name}",
                "-keyout", f"{name}.key", "-out", f"{name}.csr", cwd=where)  # fmt: skip
        (where / f"{name}.ext").write_text(ext + "\n" if ext else "basicConstraints=CA:FALSE\n")
        openssl("x509", "-req", "-in", f"{name}.csr", "-CA", "ca.pem", "-CAkey", "ca.key",
                "-CAcreateserial", "-days", "2", "-extfile", f"{name}.ext",
                "-out", f"{name}.pem", cwd=where)  # fmt: skip
    return where


class Handler(BaseHTTPRequestHandler):
    seen_tokens: list[str] = []

    def do_GET(self) -> None:
        Handler.seen_tokens.append(self.headers.get("X-SLURM-USER-TOKEN", ""))
        body = json.dumps({"pings": [{"pinged": "UP"}], "errors": []}).encode()
        self.send_response(200)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args: Any) -> None:
        return


@pytest.fixture
def https_server(pki: Path) -> Iterator[str]:
    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    context.load_cert_chain(pki / "server.pem", pki / "server.key")
    context.load_verify_locations(pki / "ca.pem")
    context.verify_mode = ssl.CERT_REQUIRED  # only clients with a certificate of the CA
    server.socket = context.wrap_socket(server.socket, server_side=True)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"https://127.0.0.1:{server.server_address[1]}"
    finally:
        server.shutdown()
        server.server_close()
        thread.join(5)


async def test_https_verifies_the_server_with_the_ca_file_and_presents_the_client_cert(
    pki: Path, https_server: str, tmp_path: Path
) -> None:
    Handler.seen_tokens.clear()
    token = private_token(tmp_path)
    tls = tls_context(
        ca_file=pki / "ca.pem", client_cert=pki / "client.pem", client_key=pki / "client.key"
    )
    client = RestClient(https_server, token, tls=tls, timeout=10)
    try:
        assert await client.raw_request("GET", "/slurm/v0.0.45/ping/") == {
            "pings": [{"pinged": "UP"}],
            "errors": [],
        }
    finally:
        await client.aclose()
    assert Handler.seen_tokens == [TOKEN]

    Handler.seen_tokens.clear()
    untrusted = RestClient(https_server, token, timeout=10)  # system CAs: not this server's
    no_cert = RestClient(https_server, token, tls=tls_context(ca_file=pki / "ca.pem"), timeout=10)
    for refused in (untrusted, no_cert):
        try:
            with pytest.raises(SchedulerError) as info:
                await refused.raw_request("GET", "/slurm/v0.0.45/ping/")
            assert TOKEN not in str(info.value)
        finally:
            await refused.aclose()
    assert Handler.seen_tokens == []  # the token never left without a verified server


def test_the_factory_builds_the_tls_client(pki: Path, tmp_path: Path) -> None:
    settings = ClusterSettings(
        scheduler="slurmrestd",
        slurmrestd_url="https://127.0.0.1:6820",
        slurmrestd_token_file=private_token(tmp_path),
        slurmrestd_tls={
            "server_ca": str(pki / "ca.pem"),
            "client_cert": str(pki / "client.pem"),
            "client_key": str(pki / "client.key"),
        },
    )
    backend = scheduler_for(settings)
    assert isinstance(backend, SlurmRest) and backend.client._tls is not None


# ------------------------------------------------------------------ the token is never shown
def failing_slurmrestd(request: httpx.Request) -> httpx.Response:
    """A slurmrestd whose every answer fails, some quoting the request's token back."""
    token = request.headers.get("X-SLURM-USER-TOKEN", "")
    path = request.url.path
    if path.endswith("/ping/"):
        return httpx.Response(200, json={"pings": [{"pinged": "UP"}], "errors": []})
    if path.endswith("/jobs/"):
        return httpx.Response(401, text=f"token {token} rejected")
    if path.endswith("/nodes/"):
        error = {"description": f"bad token {token}", "error_number": 1007, "error": "auth"}
        return httpx.Response(511, json={"errors": [error]})
    if path.endswith("/jobs/state/"):
        raise httpx.ConnectError(f"refused while sending {token}", request=request)
    if "/job/" in path and request.method == "POST":
        return httpx.Response(500, json={"errors": [{"description": f"{token} no"}]})
    return httpx.Response(400, content=f"\xff{token}".encode("latin-1"))


async def test_no_failure_shows_the_token(
    tmp_path: Path, caplog: pytest.LogCaptureFixture, monkeypatch: pytest.MonkeyPatch
) -> None:
    telemetry = shared_telemetry()
    notes = JobNotes(logging.getLogger("test"))
    monkeypatch.setattr(slurm_rest, "_UNREADABLE", notes)
    monkeypatch.setattr(slurm_json, "_UNREADABLE", notes)
    token_path = private_token(tmp_path)
    client = RestClient(
        "unix:/nonexistent/slurmrestd.socket",
        token_path,
        transport=httpx.MockTransport(failing_slurmrestd),
        timeout=2,
    )
    runner = CommandRunner(bin_dir=str(tmp_path / "no-slurm-here"), timeout=2)
    sched = SlurmRest("c1", client, requeue_runner=runner, verify_timeout=0.5, poll_interval=0.05)
    monkeypatch.setattr(slurm_rest, "REQUEUE_PARSERS", frozenset())  # the scontrol path too
    failures: list[BaseException] = []
    operations = [
        sched.list_jobs(),
        sched.list_nodes(),
        sched.list_active_jobs(),
        sched.get_job("17"),
        sched.get_node("gpu1"),
        sched.release_stale_hold("17", 1.0),
        sched.drain_node("gpu1", "resurrect: test"),
        sched._act_requeuehold("17"),
        sched._act_cancel("17"),
        client.raw_request("GET", "/slurm/v0.0.45/other/"),
    ]
    with caplog.at_level(logging.DEBUG):
        for operation in operations:
            try:
                await asyncio.wait_for(operation, 10)
            except Exception as exc:  # every one fails: that is the point
                failures.append(exc)
    assert len(failures) == len(operations)
    shown = [
        *("".join(traceback.format_exception(exc)) for exc in failures),
        *(repr(exc) for exc in failures),
        *(record.getMessage() for record in caplog.records),
        *(str(record.args) for record in caplog.records),
        *notes.latest.values(),
        repr(client),
        repr(client.token),
        repr(vars(client)),
        repr(vars(client.token)),
        repr(sched),
        repr(ClusterSettings(slurmrestd_url="unix:/x", slurmrestd_token_file=token_path)),
        repr(ResurrectConfig.model_validate({"cluster": {"name": "c1"}})),
        telemetry.memory.get_metrics_data().to_json() if telemetry.memory else "",
        json.dumps([span.to_json() for span in telemetry.spans.get_finished_spans()]),
    ]
    leaks = [text for text in shown if TOKEN in text]
    assert leaks == []
    assert any("<slurmrestd token>" in text for text in shown)  # it was quoted, and replaced


# ------------------------------------------------------------------ fuzzing
ipv4 = st.ip_addresses(v=4).map(str)
ipv6 = st.ip_addresses(v=6).map(lambda a: f"[{a}]")
names = st.from_regex(r"[a-z][a-z0-9.-]{0,30}", fullmatch=True)


@settings(max_examples=1000, deadline=None)
@given(st.one_of(ipv4, ipv6, names), st.one_of(st.none(), st.integers(1, 65535)))
def test_clear_text_goes_only_to_loopback(host: str, port: int | None) -> None:
    url = f"http://{host}" + (f":{port}" if port else "")
    bare = host.strip("[]")
    loopback = bare == "localhost" or (
        (bare[0].isdigit() or ":" in bare) and ipaddress.ip_address(bare).is_loopback
    )
    refusal = cleartext_refusal(url, what="t", allow_setting="s")
    assert (refusal is None) is loopback, url
    assert cleartext_refusal("https" + url[4:], what="t", allow_setting="s") is None
    assert cleartext_refusal(url, what="t", allow_setting="s", allow_plaintext=True) is None


@settings(max_examples=500, deadline=None)
@given(st.text(alphabet=st.characters(min_codepoint=33, max_codepoint=126), min_size=8,
               max_size=200), st.text(max_size=100), st.text(max_size=100))  # fmt: skip
def test_any_text_quoting_the_token_has_it_replaced(token: str, before: str, after: str) -> None:
    path = Path(tempfile.mkdtemp()) / "token"
    path.write_text(token)
    path.chmod(0o600)
    client = RestClient("unix:/nonexistent", path)
    secret = client.token.get()
    assume(secret not in REDACTED)  # the marker itself is no leak
    shown = client.redacted(SchedulerError(before + secret + after))
    assert secret not in str(shown) and REDACTED in str(shown)
