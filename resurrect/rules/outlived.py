"""File-system refusals the job outlived: set-up steps and warnings that caused nothing after them.

A job script's shell steps (``rm: cannot remove '/usr/local/cuda/compat/lib': Read-only file
system``, ``mkdir: cannot create directory '/data/cache': Permission denied``) and a program's
warnings (``UserWarning: ... Read-only file system``) report a file system refusing one
operation; the job went on. When the log shows a failure of another class *after* such a line,
the job outlived the refusal, and the refusal is no root of that failure: a watchdog timeout ten
minutes into training was not caused by a container's start-up ``rm``. Only storage refusals are
set aside this way - a set-up step can root a storage failure and nothing else, and the job's own
refusal (an ``OSError`` raised by a checkpoint save, with the other ranks' timeouts after it) is
not a set-up line and keeps its place as the root.

Time alone is no sign of a refusal outlived: a save's ``OSError`` followed half an hour later by
the other ranks' collective timeouts (the default timeout) is the classic root and cascade.
"""

from __future__ import annotations

import re
from collections.abc import Sequence

from resurrect.contracts import Evidence, FaultClass
from resurrect.rules.text import split_prefixes

SETUP_ROOTED_CLASS = FaultClass.STORAGE_ERROR
"""The one class a set-up refusal can root."""
_SHELL_STEP = re.compile(
    r"(?:/[\w.+-]{1,64}){0,8}/?"
    r"(?:rm|rmdir|mkdir|cp|mv|ln|chmod|chown|chgrp|touch|tee|install|tar|rsync|sed|cat|"
    r"mount|umount|ldconfig|bash|sh|dash|zsh|[\w.-]{1,64}\.sh)"
    r"(?:: line [0-9]{1,6})?: "
)
"""A shell utility's or a script's complaint: ``prog: message`` (coreutils' form), ``bash:
/path: ...`` or ``entrypoint.sh: line 3: ...``, the program name bare or with its path."""
_WARNING = re.compile(
    r"(?:\[W[ 0-9]|WARN(?:ING)?\b|[Ww]arning:|(?:[^\s:]{1,200}:[0-9]{1,6}: )?[\w.]{0,80}Warning:)"
)
"""A line a program logged as a warning: ``WARNING``/``WARN``, c10's ``[W ...]``, ``Warning:``, a
Python warning (``path.py:600: UserWarning:``). A glog ``W`` line is not one: TensorFlow and XLA log
an op that failed (``W ... OP_REQUIRES failed at ...``) at that level."""


def setup_shaped(ev: Evidence) -> bool:
    """The line is a shell step's complaint or a warning, not a failure the job raised."""
    body = split_prefixes(ev.text).body.lstrip()
    return bool(_SHELL_STEP.match(body) or _WARNING.match(body))


def outlived_refusals(roots: Sequence[Evidence], evidence: Sequence[Evidence]) -> list[Evidence]:
    """The storage roots that are set-up steps or warnings with a failure of another class after
    them in the same file: refusals the job outlived."""
    out: list[Evidence] = []
    for ev in roots:
        if ev.fault_class is not SETUP_ROOTED_CLASS or ev.line is None or not setup_shaped(ev):
            continue
        if any(_later_failure(ev, other) for other in evidence):
            out.append(ev)
    return out


def _later_failure(refusal: Evidence, other: Evidence) -> bool:
    return (
        other.fault_class is not None
        and other.fault_class is not refusal.fault_class
        and other.role in ("root", "cascade")
        and other.file == refusal.file
        and other.line is not None
        and refusal.line is not None
        and other.line > refusal.line
    )
