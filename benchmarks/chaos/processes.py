"""resurrect's long-lived processes as the soak runs them, each restartable after a kill.

A :class:`Supervised` part starts its argv in its own session, records each process's life
(pid, start, end, RSS samples) in the soak's history, and is started again when it exits on
its own, as systemd's ``Restart=`` does in production (``deploy/systemd``). ``kill`` sends
SIGKILL and keeps it down until ``start``.
"""

from __future__ import annotations

import os
import signal
import subprocess
import time
from collections.abc import Sequence
from pathlib import Path

from .history import ProcessLife


def rss_kb(pid: int) -> int | None:
    """Resident set size of ``pid`` in KiB (VmRSS), or None when it is gone."""
    try:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith("VmRSS:"):
                return int(line.split()[1])
    except (OSError, ValueError, IndexError):
        return None
    return None


class Supervised:
    """One part of resurrect (worker, watcher, watchdog, an agent) as a child process."""

    def __init__(self, part: str, argv: Sequence[str], env: dict[str, str], log_path: Path) -> None:
        self.part = part
        self.argv = list(argv)
        self.env = env
        self.log_path = log_path
        self.process: subprocess.Popen[bytes] | None = None
        self.life: ProcessLife | None = None
        self.lives: list[ProcessLife] = []
        self.held_down = False  # killed on purpose: not restarted until start()
        self.unexpected_exits = 0

    @property
    def pid(self) -> int | None:
        return self.process.pid if self.process is not None else None

    def start(self) -> None:
        """Start the part; a running process of it is stopped first (never two at once)."""
        if self.process is not None and self.process.poll() is None:
            self._end(signal.SIGTERM)
        self.held_down = False
        with open(self.log_path, "ab") as log:
            self.process = subprocess.Popen(
                self.argv, env=self.env, stdout=log, stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL, start_new_session=True,
            )  # fmt: skip
        self.life = ProcessLife(self.part, self.process.pid, time.time())
        self.lives.append(self.life)

    def kill(self) -> None:
        """SIGKILL the process (and its session) and keep it down until :meth:`start`."""
        self.held_down = True
        self._end(signal.SIGKILL)

    def stop(self) -> None:
        """SIGTERM, then SIGKILL after 15 s."""
        self.held_down = True
        self._end(signal.SIGTERM)

    def _end(self, sig: int) -> None:
        process = self.process
        if process is None:
            return
        if process.poll() is None:
            try:
                os.killpg(process.pid, sig)
            except ProcessLookupError:
                pass
            try:
                process.wait(timeout=15)
            except subprocess.TimeoutExpired:
                os.killpg(process.pid, signal.SIGKILL)
                process.wait(timeout=5)
        if self.life is not None and self.life.ended_at is None:
            self.life.ended_at = time.time()

    def look(self) -> None:
        """Record its RSS; start it again if it exited on its own (systemd's Restart=)."""
        if self.process is None or self.held_down:
            return
        if self.process.poll() is not None:
            if self.life is not None and self.life.ended_at is None:
                self.life.ended_at = time.time()
            self.unexpected_exits += 1
            self.start()
            return
        kb = rss_kb(self.process.pid)
        if kb is not None and self.life is not None:
            self.life.rss_kb.append((time.time(), kb))
