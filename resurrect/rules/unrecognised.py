"""Fatal-looking lines no rule has a class for: what a diagnosis of ``unknown`` points at.

The ``unrecognised`` pack marks every line that looks fatal in any stack's words (an exception
ending a traceback, a glog FATAL line, a failed CHECK, a Go panic). When no rule decides a
class, the first of them in print order is the line that looked decisive, and its *shape* - the
exception's name, the source file of a FATAL log line, or the kind of marker - is what the
unknown metric counts, so operators can see which wording to teach next.
"""

from __future__ import annotations

import re
from collections.abc import Sequence

from resurrect.contracts import Diagnosis, Evidence, FaultClass
from resurrect.rules.timeline import print_order

UNRECOGNISED_RULE = "fatal.unrecognised"
MAX_SHAPE_CHARS = 64
_UNSAFE = re.compile(r"[^A-Za-z0-9_.:-]")


def first_unrecognised(evidence: Sequence[Evidence]) -> Evidence | None:
    """The first fatal-looking line in print order (an ERROR-level log line only where no line
    looks fatal), or None."""
    lines = print_order([e for e in evidence if e.rule == UNRECOGNISED_RULE])
    fatal = [e for e in lines if e.fields.get("level") != "E"]
    return next(iter(fatal or lines), None)


def fatal_shape(line: Evidence) -> str:
    """A short label for the wording of a fatal-looking line: ``exception:XlaRuntimeError``,
    ``fatal-log:gpu_util.cc`` (``error-log:`` for an ERROR-level line), ``check-failed``,
    ``panic`` or ``fatal``; only letters, digits and ``_.:-``, at most :data:`MAX_SHAPE_CHARS`
    characters."""
    fields = line.fields
    if fields.get("exception"):
        shape = "exception:" + fields["exception"]
    elif fields.get("source"):
        kind = "error-log:" if fields.get("level") == "E" else "fatal-log:"
        shape = kind + fields["source"]
    elif fields.get("check"):
        shape = "check-failed"
    elif fields.get("panic"):
        shape = "panic"
    else:
        shape = "fatal"
    return _UNSAFE.sub("_", shape)[:MAX_SHAPE_CHARS]


def unknown_shape(diagnosis: Diagnosis) -> str | None:
    """For a diagnosis of ``unknown``: the shape of its first fatal-looking line, or ``none``
    when it has none; None for any other class."""
    if diagnosis.fault_class is not FaultClass.UNKNOWN:
        return None
    line = first_unrecognised(diagnosis.evidence)
    return fatal_shape(line) if line is not None else "none"
