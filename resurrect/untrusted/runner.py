"""Run one parse in the helper process, bounded, from any thread; every failure is a note.

:func:`run_parse` starts ``python -s -m resurrect.untrusted.helper`` (argv list, its own
session, cwd ``/``, a minimal environment, no inherited descriptors), sends it the request,
and reads its one JSON reply while the wall-clock deadline lasts and the output stays under
its cap. Past either, or when the helper dies (its CPU or memory limit, a signal from the
job's owner, whose uid it runs as), the whole process group is killed and the caller gets
:class:`~resurrect.errors.JobFileRefused` saying so. Waiting is in ``select``, which
releases the GIL: the caller's other threads and event loop keep running.
"""

from __future__ import annotations

import contextlib
import json
import os
import selectors
import signal
import subprocess
import sys
import time
from dataclasses import dataclass

from resurrect.errors import JobFileRefused
from resurrect.untrusted.privileges import HasIds

_MAX_STDERR = 16 << 10


@dataclass(frozen=True, slots=True)
class ParseLimits:
    """What one parse may use: wall-clock seconds, CPU seconds, address space, reply bytes."""

    wall_s: float = 10.0
    cpu_s: int = 5
    memory_bytes: int = 1 << 30
    output_bytes: int = 256 << 10


def helper_env() -> dict[str, str]:
    """The environment of a helper: a PATH, a UTF-8 locale, and the source tree's
    PYTHONPATH when there is one (tests, development); nothing else of the caller's."""
    env = {"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "LANG": "C.UTF-8"}
    if "PYTHONPATH" in os.environ:
        env["PYTHONPATH"] = os.environ["PYTHONPATH"]
    return env


def run_parse(
    op: str, args: dict[str, object], owner: HasIds | None, limits: ParseLimits = ParseLimits()
) -> dict[str, object]:
    """The helper's reply to ``op`` on ``args``, parsed as ``owner`` within ``limits``.

    Raises :class:`JobFileRefused` (the note) when the helper refused the input, failed,
    or overran a limit; ``OSError`` when it could not open the file (errno kept)."""
    request = {
        "op": op,
        "args": args,
        "owner": None if owner is None else [owner.uid, owner.gid],
        "cpu_s": limits.cpu_s,
        "memory_bytes": limits.memory_bytes,
    }
    what = str(args.get("path", op))
    try:
        proc = subprocess.Popen(
            [sys.executable, "-s", "-m", "resurrect.untrusted.helper"],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            cwd="/",
            env=helper_env(),
            start_new_session=True,
        )
    except OSError as exc:
        raise JobFileRefused(f"{what}: the parse helper did not start ({exc}): not read") from None
    try:
        out, err, overran = _exchange(proc, json.dumps(request).encode(), limits)
    finally:
        if proc.poll() is None:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()
    if overran:
        raise JobFileRefused(f"{what}: {overran}: stopped it, not read")
    return _reply(what, out, err, proc.returncode, limits)


def _exchange(
    proc: subprocess.Popen[bytes], request: bytes, limits: ParseLimits
) -> tuple[bytes, bytes, str]:
    """Send the request, gather stdout (capped) and the tail of stderr until both close;
    the third item says which limit was passed ("" when none)."""
    assert proc.stdin is not None and proc.stdout is not None and proc.stderr is not None
    with contextlib.suppress(BrokenPipeError):
        proc.stdin.write(request)  # a few hundred bytes: fits the pipe, never blocks
    with contextlib.suppress(BrokenPipeError):
        proc.stdin.close()
    deadline = time.monotonic() + limits.wall_s
    late = f"the parse did not finish within {limits.wall_s:g} s"
    out, err = bytearray(), bytearray()
    with selectors.DefaultSelector() as selector:
        selector.register(proc.stdout, selectors.EVENT_READ, out)
        selector.register(proc.stderr, selectors.EVENT_READ, err)
        while selector.get_map():
            left = deadline - time.monotonic()
            if left <= 0:
                return bytes(out), bytes(err), late
            for key, _ in selector.select(left):
                chunk = os.read(key.fd, 65536)
                if not chunk:
                    selector.unregister(key.fileobj)
                    continue
                sink: bytearray = key.data
                sink.extend(chunk)
                if sink is out and len(out) > limits.output_bytes:
                    return bytes(out), bytes(err), "the parse helper's reply was too large"
                if sink is err and len(err) > _MAX_STDERR:
                    del err[: len(err) - _MAX_STDERR]
    left = max(0.0, deadline - time.monotonic())
    try:
        proc.wait(timeout=left)
    except subprocess.TimeoutExpired:
        return bytes(out), bytes(err), late
    return bytes(out), bytes(err), ""


def _reply(
    what: str, out: bytes, err: bytes, status: int | None, limits: ParseLimits
) -> dict[str, object]:
    try:
        reply = json.loads(out.decode("utf-8")) if out.strip() else None
    except ValueError:
        reply = None
    if isinstance(reply, dict):
        if "refused" in reply:
            raise JobFileRefused(str(reply["refused"])[:2000])
        if "oserror" in reply:
            errno_value = reply.get("errno")
            number = errno_value if isinstance(errno_value, int) else 0
            raise OSError(number, str(reply["oserror"])[:500], what)
        if "result" in reply and status == 0:
            return reply
    if status is not None and status < 0:
        why = {
            int(signal.SIGXCPU): f"it used more than its {limits.cpu_s} CPU seconds",
            int(signal.SIGKILL): "it was killed (its CPU limit, or by the job's owner)",
        }.get(-status, f"it was killed by signal {-status}")
        raise JobFileRefused(f"{what}: the parse helper stopped: {why}: not read")
    last = err.decode("utf-8", "replace").strip().splitlines()[-1:]
    detail = f" ({last[0][:300]})" if last else ""
    raise JobFileRefused(f"{what}: the parse helper failed (status {status}){detail}: not read")
