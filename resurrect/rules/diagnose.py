"""Offline diagnosis: scan files or lines with an engine, then attribute.

A log file to diagnose is usually a job's output, so it is opened as the log follower opens
one (:func:`resurrect.log_reading.open_job_file`): only a regular file, never blocking (a
FIFO, socket, device or a symlink at the path is refused with a note), and at most its last
:data:`MAX_FILE_BYTES` bytes are read (holes skipped), so ``/dev/zero`` behind a name or a
sparse terabyte cannot keep the command reading.
"""

from __future__ import annotations

import os
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from resurrect.contracts import Diagnosis, Evidence, SignalKind
from resurrect.log_reading import CHUNK, open_job_file, read_data
from resurrect.rules.attribution import attribute
from resurrect.rules.engine import RuleEngine, default_engine

MAX_FILE_BYTES = 1 << 30  # of one file, from its end
BINARY_SNIFF_BYTES = 8192  # a NUL byte in the first bytes read marks a binary file


@dataclass
class ScannedLog:
    """What one log file gave: its evidence, whether it looked binary, and a note when not
    all of it was read (the reason it could not be read is an exception instead)."""

    evidence: list[Evidence] = field(default_factory=list)
    binary: bool = False
    note: str | None = None


def scan_log_file(
    path: Path,
    *,
    engine: RuleEngine,
    kind: SignalKind = SignalKind.JOB_LOG,
    max_bytes: int = MAX_FILE_BYTES,
    skip_binary: bool = False,
) -> ScannedLog:
    """Scan the last ``max_bytes`` of ``path`` (a regular file, opened without blocking).
    Raises :class:`~resurrect.errors.JobFileRefused` (the note) or ``OSError``."""
    fd = open_job_file(path, None)
    try:
        size = os.fstat(fd).st_size
        start = max(0, size - max_bytes)
        state = engine.new_state(kind=kind, file=str(path))
        out = ScannedLog()
        position = start
        while position < size:
            end = min(size, position + CHUNK)
            data = read_data(fd, position, end)
            if position == start and skip_binary and b"\x00" in data[:BINARY_SNIFF_BYTES]:
                return ScannedLog(binary=True)
            out.evidence.extend(engine.scan_chunk(data, state))
            position = end
        out.evidence.extend(engine.finish(state))
    finally:
        os.close(fd)
    if start:
        out.note = (
            f"{path}: only its last {max_bytes} bytes were read (it has {size});"
            f" line numbers count from byte {start}"
        )
    return out


def diagnose_files(
    paths: Sequence[Path],
    *,
    engine: RuleEngine | None = None,
    rank_to_host: Mapping[int, str] | None = None,
    kind: SignalKind = SignalKind.JOB_LOG,
) -> Diagnosis:
    """Diagnose one interruption from its log files (:func:`scan_log_file` each; its errors
    propagate, the CLI reports them)."""
    engine = engine or default_engine()
    evidence: list[Evidence] = []
    for path in paths:
        evidence.extend(scan_log_file(Path(path), engine=engine, kind=kind).evidence)
    return attribute(evidence, rank_to_host=rank_to_host, confidences=engine.confidences())


def diagnose_lines(
    lines: Iterable[str | bytes],
    *,
    file: str | None = None,
    engine: RuleEngine | None = None,
    rank_to_host: Mapping[int, str] | None = None,
    kind: SignalKind = SignalKind.JOB_LOG,
) -> Diagnosis:
    """Diagnose one interruption from lines of text (e.g. a log already in memory, or stdin)."""
    engine = engine or default_engine()
    evidence = engine.scan_lines(lines, kind=kind, file=file)
    return attribute(evidence, rank_to_host=rank_to_host, confidences=engine.confidences())
