"""Log attribution: rule packs (YAML data), a fast line engine, and attribution to one cause.

Public API::

    from resurrect.rules import RuleEngine, load_engine, attribute, diagnose_files, diagnose_lines

    engine = load_engine(extra_paths)             # shipped packs + user packs (RuleError on error)
    engine.scan_line(text, kind=..., file=..., line=..., host=...) -> list[Evidence]
    state = engine.new_state(kind=..., file=..., host=...)
    engine.scan_chunk(data, state) -> list[Evidence]   # streaming: partial lines carried over
    engine.finish(state) -> list[Evidence]             # the unterminated last line
    attribute(evidence, rank_to_host=...) -> Diagnosis
    diagnose_files(paths, engine=..., rank_to_host=...) -> Diagnosis
    diagnose_lines(lines, file=..., engine=..., rank_to_host=...) -> Diagnosis

See :mod:`resurrect.rules.engine` for the streaming and robustness guarantees (bounded line
length, invalid UTF-8, ANSI codes, CRLF, launcher prefixes) and :mod:`resurrect.rules.attribution`
for how evidence is weighed.
"""

from resurrect.rules.attribution import attribute
from resurrect.rules.diagnose import diagnose_files, diagnose_lines
from resurrect.rules.engine import RuleEngine, ScanState, default_engine, load_engine
from resurrect.rules.text import LineSplitter

__all__ = [
    "LineSplitter",
    "RuleEngine",
    "ScanState",
    "attribute",
    "default_engine",
    "diagnose_files",
    "diagnose_lines",
    "load_engine",
]
