"""Who waits: a process's state and the kernel function its main thread sleeps in."""

from __future__ import annotations

import os
import platform
import threading
import time
from pathlib import Path

from resurrect.stacks.sampling import FUTEX_SYSCALL, is_waiting


def fake_proc(tmp_path: Path, state: str, wchan: str, syscall: str = "") -> Path:
    (tmp_path / "7").mkdir(parents=True)
    (tmp_path / "7" / "stat").write_text(f"7 (python (x)) {state} 1 2 3\n")
    (tmp_path / "7" / "wchan").write_text(wchan)
    (tmp_path / "7" / "syscall").write_text(syscall)
    return tmp_path


def test_blocked_on_a_futex_is_waiting(tmp_path: Path) -> None:
    assert is_waiting(7, fake_proc(tmp_path, "S", "futex_do_wait")) == ("S", True)


def test_sleeping_or_stopped_is_not_waiting(tmp_path: Path) -> None:
    assert is_waiting(7, fake_proc(tmp_path / "a", "S", "hrtimer_nanosleep")) == ("S", False)
    assert is_waiting(7, fake_proc(tmp_path / "b", "T", "do_signal_stop")) == ("T", False)


def test_a_hidden_wchan_falls_back_to_the_syscall_number(tmp_path: Path) -> None:
    futex = FUTEX_SYSCALL.get(platform.machine(), "202")
    proc = fake_proc(tmp_path, "S", "0", f"{futex} 0x1 0x2")
    assert is_waiting(7, proc)[1] is (platform.machine() in FUTEX_SYSCALL)


def test_a_real_thread_blocked_on_a_condition_is_waiting() -> None:
    """This process's own thread, blocked in threading.Event.wait (a futex)."""
    event = threading.Event()
    native: list[int] = []

    def block() -> None:
        native.append(threading.get_native_id())
        event.wait()

    worker = threading.Thread(target=block)
    worker.start()
    time.sleep(0.2)
    try:
        state, waiting = is_waiting(native[0], Path(f"/proc/{os.getpid()}/task"))
        assert state == "S" and waiting
    finally:
        event.set()
        worker.join()
