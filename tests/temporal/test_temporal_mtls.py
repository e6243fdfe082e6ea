"""Attack 13 (transport): the default Temporal connection had no TLS, so anyone who could
reach the frontend could start a workflow (and so a recovery) or read every recovery.

Temporal servers authenticate clients with mutual TLS. resurrect's client takes
``temporal.tls`` (client certificate and key, the server's CA, its name) and now refuses a
plaintext connection to anything but loopback unless told otherwise. The temporal CLI's dev
server (1.9.x) has no TLS options, so the server side here is the dev server behind a
TLS terminator that requires a client certificate signed by the cluster's CA (what an
Envoy or nginx in front of a Temporal frontend does, and what the frontend does itself with
``global.tls.frontend.requireClientAuth``). The certificates are a throwaway CA, server and
client, made with the openssl CLI (argv lists).
"""

from __future__ import annotations

import asyncio
import contextlib
import shutil
import ssl
import subprocess
from collections.abc import AsyncIterator
from pathlib import Path

import pytest
from support.requirements import missing
from temporalio.client import Client

from resurrect.config import TemporalSettings, TlsSettings
from resurrect.errors import ConfigError, ResurrectError
from resurrect.temporal.client import connect
from resurrect.temporal.server import EmbeddedTemporal

pytestmark = pytest.mark.temporal

SERVER_NAME = "temporal.resurrect.test"


def openssl(*argv: str) -> None:
    subprocess.run(["openssl", *argv], check=True, capture_output=True, timeout=60)


def make_ca(folder: Path, name: str) -> tuple[Path, Path]:
    key, cert = folder / f"{name}.key", folder / f"{name}.pem"
    openssl("genpkey", "-algorithm", "EC", "-pkeyopt", "ec_paramgen_curve:P-256", "-out", str(key))
    openssl(
        "req", "-x509", "-new", "-key", str(key), "-out", str(cert), "-days", "1",
        "-subj", f"/CN={name}",
        "-addext", "basicConstraints=critical,CA:TRUE",
        "-addext", "keyUsage=critical,keyCertSign,cRLSign",
    )  # fmt: skip
    return key, cert


def issue(folder: Path, ca: tuple[Path, Path], name: str, extensions: str) -> tuple[Path, Path]:
    key, csr, cert = folder / f"{name}.key", folder / f"{name}.csr", folder / f"{name}.pem"
    ext = folder / f"{name}.ext"
    ext.write_text(extensions)
    openssl("genpkey", "-algorithm", "EC", "-pkeyopt", "ec_paramgen_curve:P-256", "-out", str(key))
    openssl("req", "-new", "-key", str(key), "-out", str(csr), "-subj", f"/CN={name}")
    openssl(
        "x509", "-req", "-in", str(csr), "-CA", str(ca[1]), "-CAkey", str(ca[0]),
        "-CAcreateserial", "-out", str(cert), "-days", "1", "-extfile", str(ext),
    )  # fmt: skip
    return key, cert


class Pki:
    def __init__(self, folder: Path) -> None:
        self.ca = make_ca(folder, "cluster-ca")
        self.server = issue(
            folder,
            self.ca,
            "server",
            f"subjectAltName=DNS:{SERVER_NAME},IP:127.0.0.1\n"
            "keyUsage=critical,digitalSignature\nextendedKeyUsage=serverAuth\n",
        )
        client_ext = "keyUsage=critical,digitalSignature\nextendedKeyUsage=clientAuth\n"
        self.client = issue(folder, self.ca, "resurrect-worker", client_ext)
        rogue_ca = make_ca(folder, "rogue-ca")
        self.rogue_client = issue(folder, rogue_ca, "rogue", client_ext)


@pytest.fixture(scope="module")
def pki(tmp_path_factory: pytest.TempPathFactory) -> Pki:
    if shutil.which("openssl") is None:
        missing("openssl CLI missing (apt-get install openssl; deploy/install.sh does)")
    return Pki(tmp_path_factory.mktemp("pki"))


@contextlib.asynccontextmanager
async def mtls_frontend(pki: Pki, upstream: str) -> AsyncIterator[str]:
    """A TLS endpoint requiring a client certificate of the cluster CA, in front of Temporal."""
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    context.minimum_version = ssl.TLSVersion.TLSv1_2
    context.load_cert_chain(str(pki.server[1]), str(pki.server[0]))
    context.load_verify_locations(str(pki.ca[1]))
    context.verify_mode = ssl.CERT_REQUIRED
    context.set_alpn_protocols(["h2"])
    host, port = upstream.rsplit(":", 1)
    tasks: set[asyncio.Task[None]] = set()

    async def pipe(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        with contextlib.suppress(ConnectionError, ssl.SSLError, OSError):
            while data := await reader.read(65536):
                writer.write(data)
                await writer.drain()
        with contextlib.suppress(Exception):
            writer.close()

    async def handle(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        up_reader, up_writer = await asyncio.open_connection(host, int(port))
        for task in (pipe(reader, up_writer), pipe(up_reader, writer)):
            tasks.add(asyncio.create_task(task))

    server = await asyncio.start_server(handle, "127.0.0.1", 0, ssl=context)
    address = server.sockets[0].getsockname()
    try:
        yield f"127.0.0.1:{address[1]}"
    finally:
        server.close()
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)


def settings(address: str, tls: TlsSettings | None, **extra: object) -> TemporalSettings:
    return TemporalSettings.model_validate(
        {"embedded": False, "address": address, "tls": tls, **extra}
    )


async def test_resurrect_connects_with_its_client_certificate(
    pki: Pki, temporal_server: EmbeddedTemporal
) -> None:
    tls = TlsSettings(
        client_cert=pki.client[1],
        client_key=pki.client[0],
        server_ca=pki.ca[1],
        server_name=SERVER_NAME,
    )
    async with mtls_frontend(pki, temporal_server.address) as address:
        client: Client = await connect(settings(address, tls), attempts=3)
        count = await client.count_workflows("WorkflowType = 'RecoveryWorkflow'")
        assert count.count >= 0  # a real round trip through the TLS frontend


@pytest.mark.parametrize("who", ["no client certificate", "certificate of another CA", "plain"])
async def test_without_a_cluster_certificate_the_connection_fails(
    pki: Pki, temporal_server: EmbeddedTemporal, who: str
) -> None:
    tls: TlsSettings | None
    if who == "no client certificate":
        tls = TlsSettings(server_ca=pki.ca[1], server_name=SERVER_NAME)
    elif who == "certificate of another CA":
        tls = TlsSettings(
            client_cert=pki.rogue_client[1],
            client_key=pki.rogue_client[0],
            server_ca=pki.ca[1],
            server_name=SERVER_NAME,
        )
    else:
        tls = None
    async with mtls_frontend(pki, temporal_server.address) as address:
        with pytest.raises(ResurrectError, match="cannot connect to Temporal"):
            client = await asyncio.wait_for(connect(settings(address, tls)), timeout=30)
            await client.count_workflows()


async def test_a_plaintext_connection_to_another_host_is_refused() -> None:
    with pytest.raises(ConfigError, match="refusing a plaintext"):
        await connect(settings("temporal.example.org:7233", None))
    with pytest.raises(ConfigError, match="refusing a plaintext"):
        await connect(settings("10.1.2.3:7233", None))
    # loopback (the embedded server) needs no TLS; an explicit opt-out is honoured
    for address in ("127.0.0.1:1", "localhost:1", "[::1]:1"):
        with pytest.raises(ResurrectError, match="cannot connect"):
            await connect(settings(address, None))
    with pytest.raises(ResurrectError, match="cannot connect"):
        await connect(settings("127.0.0.2:1", None, allow_plaintext=True))
