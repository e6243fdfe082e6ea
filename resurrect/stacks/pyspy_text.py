"""Parsing the text ``py-spy dump`` prints (with or without ``--native``).

::

    Process 9002: /usr/bin/python3 -u train.py
    Python v3.11.2 (/usr/bin/python3.11)

    Thread 9002 (idle): "MainThread"
        pthread_cond_wait (libc.so.6)
        c10d::Reducer::finalize_backward (libtorch_cpu.so)
        _engine_run_backward (torch/autograd/graph.py:979)
        main (train.py:248)

Frames are innermost first. A line that fits no shape is skipped; the text is bounded by the
caller (it comes from a tool, but names frames of a job-owned program: file names with
runs of spaces, parentheses, escape sequences). Every line costs time linear in its length:
the frame shape is read with ``str`` methods, the other shapes by regexes whose repeats
are bounded and cannot overlap.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field

_THREAD = re.compile(
    r"^Thread (?P<tid>0x[0-9a-fA-F]{1,16}|[0-9]{1,12})"
    r"(?: \((?P<status>[a-z ,]{1,40})\))?"
    r'(?: ?: ?"(?P<name>[^"]{0,200})")?'
)
MAX_FIELD_CHARS = 1000
_PROCESS = re.compile(r"^Process (?P<pid>[0-9]{1,12}): (?P<cmd>.{0,2000})$")


def parse_frame(line: str) -> tuple[str, str] | None:
    """``(function, where)`` of an indented ``function (where)`` line: ``where`` is the last
    parenthesised group, without parentheses, at the end of the line; None for any other
    line. (The shape ``^\\s{2,}(.{1,1000}?) \\(([^()]{1,1000})\\)\\s*$``, read in one pass.)"""
    if line[:2].strip() or len(line) < 2:
        return None
    body = line.rstrip()
    if not body.endswith(")"):
        return None
    opening = body.rfind("(")
    if opening < 1 or body[opening - 1] != " ":
        return None
    where = body[opening + 1 : -1]
    if not where or len(where) > MAX_FIELD_CHARS or ")" in where:
        return None
    start = len(body) - len(body.lstrip())
    function = body[start : opening - 1]
    if not function and start > 3:  # the pattern's function takes a space if it must
        function = body[opening - 2 : opening - 1]
    if not function or len(function) > MAX_FIELD_CHARS:
        return None
    return function.strip(), where.strip()


@dataclass(frozen=True, slots=True)
class Frame:
    function: str
    where: str  # "file.py:123" for Python frames, "libfoo.so" for native ones

    @property
    def native(self) -> bool:
        return not re.search(r"\.pyx?:[0-9]+$|\.py$", self.where)

    def __str__(self) -> str:
        return f"{self.function} ({self.where})"


@dataclass(slots=True)
class ThreadStack:
    thread_id: str
    name: str
    status: str
    frames: list[Frame] = field(default_factory=list)


@dataclass(slots=True)
class StackDump:
    pid: int | None
    command: str
    threads: list[ThreadStack]

    def main_thread(self) -> ThreadStack | None:
        """The thread that runs the training loop: "MainThread", else the process's own id."""
        for thread in self.threads:
            if thread.name == "MainThread":
                return thread
        for thread in self.threads:
            if self.pid is not None and thread.thread_id == str(self.pid):
                return thread
        return self.threads[0] if self.threads else None


MAX_DUMP_CHARS = 1 << 20


def parse_pyspy_dump(text: str) -> StackDump:
    """The threads and frames of one ``py-spy dump`` output."""
    pid: int | None = None
    command = ""
    threads: list[ThreadStack] = []
    for line in text[:MAX_DUMP_CHARS].splitlines():
        if (m := _PROCESS.match(line)) is not None and pid is None:
            pid, command = int(m["pid"]), m["cmd"]
        elif (m := _THREAD.match(line)) is not None:
            threads.append(ThreadStack(m["tid"], m["name"] or "", m["status"] or ""))
        elif threads and (frame := parse_frame(line)) is not None:
            threads[-1].frames.append(Frame(*frame))
    return StackDump(pid=pid, command=command, threads=threads)


def wire_bytes(text: str) -> int:
    """What ``text`` costs in a JSON payload (escapes included)."""
    return len(json.dumps(text, ensure_ascii=False).encode("utf-8", "surrogatepass")) - 2


def _main_block(lines: list[str], starts: list[int]) -> int:
    """Which thread block (index into ``starts``) is the main thread's: "MainThread", else
    the thread whose id is the process's, else the first."""
    headers = [_THREAD.match(lines[i]) for i in starts]
    names = [m["name"] if m else None for m in headers]
    if "MainThread" in names:
        return names.index("MainThread")
    process = next((m for line in lines[: starts[0]] if (m := _PROCESS.match(line))), None)
    tids = [m["tid"] if m else None for m in headers]
    return tids.index(process["pid"]) if process and process["pid"] in tids else 0


def bounded_dump_text(text: str, limit: int) -> str:
    """``text`` when its JSON costs at most ``limit`` bytes; else its most useful part within
    ``limit``: the header, then the main thread (innermost frames first, as printed), then
    the other threads, whole lines only, ending with a line saying what was cut. Its cost is
    linear in the text's length (each line's JSON cost is computed only while room is left)."""
    whole = wire_bytes(text)
    if whole <= limit:
        return text
    marker = f"[resurrect: stack text cut to fit {limit:,} bytes of {whole:,}]"
    room = limit - wire_bytes(marker) - 2
    if room < 0:
        return ""
    lines = text.splitlines()
    starts = [i for i, line in enumerate(lines) if line.startswith("Thread ")]
    if starts:
        ends = [*starts[1:], len(lines)]
        main = _main_block(lines, starts)
        order = [range(starts[0]), range(starts[main], ends[main])]
        order += [
            range(a, b) for n, (a, b) in enumerate(zip(starts, ends, strict=True)) if n != main
        ]
    else:
        order = [range(len(lines))]
    kept: list[str] = []
    for index in (i for block in order for i in block):
        line = lines[index]
        if len(line) + 2 > room:
            break
        cost = wire_bytes(line) + 2  # and its escaped newline
        if cost > room:
            break
        kept.append(line)
        room -= cost
    return "\n".join([*kept, marker])
