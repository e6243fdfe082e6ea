"""The rule engine: match log lines against the loaded packs, fast and safely.

Three ways in, one matcher underneath:

* :meth:`RuleEngine.scan_line` — one line (``str`` or ``bytes``), e.g. a kernel message or an
  NVML event rendered as text.
* :meth:`RuleEngine.scan_chunk` with a :class:`ScanState` — a byte stream read in arbitrary
  chunks (a live log follower, or a whole file): partial lines are carried over between calls,
  an over-long line is cut to :data:`~resurrect.rules.text.MAX_LINE_BYTES` (its first part is
  kept and the rest is dropped as it arrives), invalid UTF-8 is replaced, ANSI codes and CRs are
  removed. Call :meth:`RuleEngine.finish` at the end of the stream for an unterminated last
  line. :meth:`RuleEngine.scan_file` is this over a file.
* :meth:`RuleEngine.scan_lines` — an iterable of lines, batched into chunks.

Speed comes from the literal prefilter. Every rule names literal strings; a line can only match
a rule if it contains one of them (case-insensitively). On the chunk path the engine lower-cases
a whole chunk once and looks for each literal with ``bytes.find`` (a C-speed substring search
over megabytes), collecting only the lines that contain a literal; regexes then run on those
candidate lines alone. Healthy lines cost one pass of the substring search and nothing else.
Patterns run on at most ``MAX_LINE_BYTES`` of a line, and packs are reviewed (and fuzzed) to be
free of catastrophic backtracking.

A literal is found in the raw bytes, so an ANSI colour code inside a literal hides it on the
chunk path; codes around words (the usual case) do not.
"""

from __future__ import annotations

import re
from collections import Counter
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from functools import lru_cache
from pathlib import Path
from typing import Protocol

from resurrect.contracts import Evidence, SignalKind
from resurrect.numbers import is_ascii_digits
from resurrect.rules.loader import expand_paths, load_packs, shipped_pack_paths
from resurrect.rules.models import Rule
from resurrect.rules.text import (
    MAX_LINE_BYTES,
    LineSplitter,
    clean,
    names_no_host,
    split_prefixes,
    truncate,
)

CHUNK_BYTES = 8 * 1024 * 1024
SEARCH_GATES: tuple[str, ...] = (
    "error",
    "fail",
    "abort",
    "timeout",
    "timed out",
    "killed",
    "exception",
    "ecc",
    "peer",
    "watchdog",
    "corrupt",
    "preempt",
    "join",
    "sig",
    "exit",
    "memory",
    "connect",
    "illegal",
    "_status_",
    "oom",
)
"""Words that failure literals often contain and healthy training output rarely does: the
chunk scan searches for the word once instead of for every literal that contains it."""
_CONFIDENCES: dict[str, float] = {}
"""Rule id to confidence for every rule of every engine built in this process."""
MAX_EVIDENCE_PER_RULE = 2000
MAX_LISTED_RANKS = 64
"""A line that lists ranks (a ``rank_list`` field) counts as evidence for at most this many."""
HOST_FIELDS = ("host", "peer")
"""Rule fields that name a host."""
"""Per stream, matches of one rule beyond this are counted, not kept."""


class LineScanner(Protocol):
    """What a reader of lines needs from :class:`RuleEngine` (the log follower, the node
    agent); tests stand in for it with a few lines of their own."""

    def scan_line(
        self,
        text: str | bytes,
        *,
        kind: SignalKind = ...,
        file: str | None = ...,
        line: int | None = ...,
        host: str | None = ...,
    ) -> list[Evidence]: ...


@dataclass(frozen=True, slots=True)
class CompiledRule:
    """A validated rule with its compiled pattern, the file it came from and its pack's name."""

    rule: Rule
    source: Path
    regex: re.Pattern[str]
    pack: str = ""


@dataclass
class ScanState:
    """Per-stream state for :meth:`RuleEngine.scan_chunk` (one per file or followed log)."""

    kind: SignalKind = SignalKind.JOB_LOG
    file: str | None = None
    host: str | None = None
    splitter: LineSplitter = field(default_factory=LineSplitter)
    context_host: str | None = None
    previous_line: str = ""
    counts: Counter[str] = field(default_factory=Counter)

    @property
    def line_no(self) -> int:
        """Number of complete lines consumed so far."""
        return self.splitter.line_no

    @property
    def suppressed(self) -> dict[str, int]:
        """Matches per rule that were counted but not kept (beyond the per-rule cap)."""
        return {
            k: v - MAX_EVIDENCE_PER_RULE
            for k, v in self.counts.items()
            if v > MAX_EVIDENCE_PER_RULE
        }


class _KindIndex:
    """The literals of the rules for one signal kind, and which rules each one gates.

    For the chunk path only a minimal *search set* is looked for: a literal that contains
    another literal (``"failed (exitcode: -6)"`` contains ``"failed (exitcode: "``) or one of
    the :data:`SEARCH_GATES` can only occur where that shorter string does, so finding the
    shorter one is enough; each candidate line is then checked against the literals that
    contain what was found (``cover``). Each ``bytes.find`` pass costs about the same whatever
    the needle, so fewer needles is what makes the scan fast.
    """

    def __init__(self, rules: Sequence[CompiledRule], kind: SignalKind) -> None:
        gates: dict[str, list[int]] = {}
        for index, compiled in enumerate(rules):
            if kind in compiled.rule.kinds:
                for lit in compiled.rule.literal:
                    gates.setdefault(lit, []).append(index)
        self.gates = gates
        self.literals = tuple(gates)
        needles = {next((g for g in SEARCH_GATES if g in lit), lit) for lit in gates}
        search = [n for n in needles if not any(o != n and o in n for o in needles)]
        self.cover = {
            n.encode("utf-8"): tuple(lit for lit in gates if n in lit) for n in sorted(search)
        }
        self.search_bytes = tuple(self.cover)

    def candidates(self, lowered: str, literals: Iterable[str] | None = None) -> list[int]:
        """Rules whose literals occur in the (lower-cased) line; only ``literals`` if given."""
        hits: set[int] = set()
        for lit in self.literals if literals is None else literals:
            if lit in lowered:
                hits.update(self.gates[lit])
        return sorted(hits)


class RuleEngine:
    """Matches lines against a fixed set of rules. Thread-safe after construction."""

    def __init__(
        self,
        rules: Sequence[tuple[Path, Rule]],
        *,
        pack_names: Mapping[Path, str] | None = None,
    ) -> None:
        names = pack_names or {}
        self._rules = tuple(
            CompiledRule(
                rule=rule,
                source=src,
                regex=re.compile(rule.pattern),
                pack=names.get(src, src.stem),
            )
            for src, rule in rules
        )
        self._by_id = {c.rule.id: c for c in self._rules}
        self._index = {kind: _KindIndex(self._rules, kind) for kind in SignalKind}
        _CONFIDENCES.update(self.confidences())

    @property
    def rules(self) -> tuple[CompiledRule, ...]:
        return self._rules

    def rule(self, rule_id: str) -> Rule:
        """The rule with this id (KeyError if none)."""
        return self._by_id[rule_id].rule

    def packs(self) -> dict[str, str]:
        """Rule id to the name of the pack that defines it."""
        return {c.rule.id: c.pack for c in self._rules}

    def confidences(self) -> dict[str, float]:
        """Rule id to rule confidence, as :func:`~resurrect.rules.attribution.attribute` uses."""
        return {c.rule.id: c.rule.confidence for c in self._rules}

    def literals(self, kind: SignalKind = SignalKind.JOB_LOG) -> tuple[str, ...]:
        """The prefilter literals of the rules for ``kind`` (lower case)."""
        return self._index[kind].literals

    # -- one line -------------------------------------------------------------------------

    def scan_line(
        self,
        text: str | bytes,
        *,
        kind: SignalKind = SignalKind.JOB_LOG,
        file: str | None = None,
        line: int | None = None,
        host: str | None = None,
    ) -> list[Evidence]:
        """Evidence for every rule of ``kind`` that matches this one line."""
        state = ScanState(kind=kind, file=file, host=host)
        return self._match(clean(text), line, state, previous=str)

    def _match(
        self,
        text: str,
        line_no: int | None,
        state: ScanState,
        previous: Callable[[], str],
        literals: Iterable[str] | None = None,
    ) -> list[Evidence]:
        index = self._index[state.kind]
        candidates = index.candidates(text.lower(), literals)
        if not candidates:
            return []
        prefix = split_prefixes(text)
        found: list[Evidence] = []
        for i in candidates:
            compiled = self._rules[i]
            m = compiled.regex.search(text if compiled.rule.whole_line else prefix.body)
            if m is None:
                continue
            rule = compiled.rule
            state.counts[rule.id] += 1
            fields = {k: v for k, v in m.groupdict().items() if v is not None}
            if prefix.pid is not None and "pid" not in fields:
                fields["pid"] = prefix.pid
            if rule.capture_previous and (before := previous()):
                fields["previous_line"] = truncate(before, 512)
            for key in HOST_FIELDS:  # a masked or loopback name names no host
                if key in fields and names_no_host(fields[key]):
                    del fields[key]
            rank_text = fields.get("rank")
            rank = (
                int(rank_text)
                if rank_text is not None and is_ascii_digits(rank_text)
                else prefix.rank
            )
            ranks: list[int | None] = [rank]
            if rank_text is None:
                ranks = list(listed_ranks(fields.get("rank_list", ""))) or ranks
            named = prefix.host if prefix.host and not names_no_host(prefix.host) else None
            reporter = None if rule.reports_another_node else named or state.host
            host = fields.get("host") or reporter or state.context_host
            if rule.sets_host and fields.get("host"):
                state.context_host = fields["host"]
            if state.counts[rule.id] > MAX_EVIDENCE_PER_RULE:
                continue
            found.extend(
                Evidence(
                    kind=state.kind,
                    text=truncate(text),
                    rule=rule.id,
                    role=rule.role,
                    fault_class=rule.fault_class,
                    file=state.file,
                    line=line_no,
                    host=host,
                    rank=each,
                    gpu=fields.get("gpu") or fields.get("pci"),
                    fields=fields,
                    confidence=rule.confidence,
                )
                for each in ranks
            )
        return found

    # -- streams --------------------------------------------------------------------------

    def new_state(
        self,
        *,
        kind: SignalKind = SignalKind.JOB_LOG,
        file: str | None = None,
        host: str | None = None,
    ) -> ScanState:
        """A fresh :class:`ScanState` for one stream."""
        return ScanState(kind=kind, file=file, host=host)

    def scan_chunk(self, data: bytes, state: ScanState) -> list[Evidence]:
        """Evidence from the lines that ``data`` completes; the partial tail waits in ``state``."""
        first_nl = data.find(b"\n")
        if first_nl < 0:
            for _ in state.splitter.feed(data):  # buffers only; yields nothing
                pass
            return []
        out: list[Evidence] = []
        for line_no, raw in state.splitter.feed(data[: first_nl + 1]):
            out.extend(self._match_raw(raw, line_no, state))
        last_nl = data.rfind(b"\n")
        if last_nl > first_nl:
            out.extend(self._scan_block(data[first_nl + 1 : last_nl], state))
        for _ in state.splitter.feed(data[last_nl + 1 :]):
            pass
        return out

    def finish(self, state: ScanState) -> list[Evidence]:
        """Evidence from the stream's unterminated last line, if any."""
        out: list[Evidence] = []
        for line_no, raw in state.splitter.flush():
            out.extend(self._match_raw(raw, line_no, state))
        return out

    def _match_raw(self, raw: bytes, line_no: int, state: ScanState) -> list[Evidence]:
        text = clean(raw)
        before = state.previous_line
        found = self._match(text, line_no, state, lambda: before)
        if text.strip():
            state.previous_line = text
        return found

    def _scan_block(self, block: bytes, state: ScanState) -> list[Evidence]:
        """Complete lines (``block`` has no final newline): literal search, then regexes."""
        index = self._index[state.kind]
        lowered = block.lower()
        starts: dict[int, set[str]] = {}
        for needle in index.search_bytes:
            pos = lowered.find(needle)
            if pos < 0:
                continue
            cover = index.cover[needle]
            while pos >= 0:
                start = lowered.rfind(b"\n", 0, pos) + 1
                starts.setdefault(start, set()).update(cover)
                end = lowered.find(b"\n", pos)
                if end < 0:
                    break
                pos = lowered.find(needle, end)
        base = state.splitter.line_no
        out: list[Evidence] = []
        line_no = base
        last = 0
        for start in sorted(starts):
            line_no += block.count(b"\n", last, start)
            last = start
            end = block.find(b"\n", start)
            if end < 0:
                end = len(block)
            text = clean(block[start : min(end, start + MAX_LINE_BYTES)])
            fallback = state.previous_line

            def previous(start: int = start, fallback: str = fallback) -> str:
                return self._previous_in_block(block, start, fallback)

            out.extend(self._match(text, line_no + 1, state, previous, starts[start]))
        state.splitter.line_no = base + block.count(b"\n") + 1
        tail = self._previous_in_block(block, len(block) + 1, "")
        if tail:
            state.previous_line = tail
        return out

    @staticmethod
    def _previous_in_block(block: bytes, start: int, fallback: str) -> str:
        """The last non-blank line before offset ``start`` (a line start) in ``block``."""
        end = start - 1
        for _ in range(64):
            if end <= 0:
                return fallback
            begin = block.rfind(b"\n", 0, end) + 1
            text = clean(block[begin : min(end, begin + MAX_LINE_BYTES)])
            if text.strip():
                return text
            end = begin - 1
        return fallback

    def scan_file(
        self, path: Path, *, kind: SignalKind = SignalKind.JOB_LOG, host: str | None = None
    ) -> list[Evidence]:
        """Evidence from a whole file, read in large chunks (raises OSError as open() does)."""
        state = self.new_state(kind=kind, file=str(path), host=host)
        out: list[Evidence] = []
        with open(path, "rb") as fh:
            while chunk := fh.read(CHUNK_BYTES):
                out.extend(self.scan_chunk(chunk, state))
        out.extend(self.finish(state))
        return out

    def scan_lines(
        self,
        lines: Iterable[str | bytes],
        *,
        kind: SignalKind = SignalKind.JOB_LOG,
        file: str | None = None,
        host: str | None = None,
    ) -> list[Evidence]:
        """Evidence from an iterable of lines (each one line; trailing newlines are optional)."""
        state = self.new_state(kind=kind, file=file, host=host)
        out: list[Evidence] = []
        batch: list[bytes] = []
        size = 0
        for item in lines:
            raw = item if isinstance(item, bytes) else item.encode("utf-8", errors="replace")
            raw = raw.rstrip(b"\n").replace(b"\n", b" ")
            batch.append(raw)
            size += len(raw) + 1
            if size >= CHUNK_BYTES:
                out.extend(self.scan_chunk(b"\n".join(batch) + b"\n", state))
                batch.clear()
                size = 0
        if batch:
            out.extend(self.scan_chunk(b"\n".join(batch) + b"\n", state))
        out.extend(self.finish(state))
        return out


def known_confidences() -> dict[str, float]:
    """Confidences of all rules known to this process (the shipped packs always included).

    Evidence does not carry its rule's confidence, so attribution looks it up here; evidence
    received from another process (a sensor, an activity) is weighed by the same shipped packs.
    """
    if not _CONFIDENCES:
        default_engine()
    return dict(_CONFIDENCES)


@lru_cache(maxsize=1)
def default_engine() -> RuleEngine:
    """The engine over the shipped packs, built once per process."""
    return load_engine()


def load_engine(extra_paths: Sequence[Path] = ()) -> RuleEngine:
    """An engine over the shipped packs plus ``extra_paths`` (files or directories of packs).

    Callers that want only their own packs build ``RuleEngine`` from
    :func:`~resurrect.rules.loader.load_packs`. Raises :class:`~resurrect.errors.RuleError`
    naming the file and rule on any error.
    """
    packs = load_packs([*shipped_pack_paths(), *expand_paths(extra_paths)])
    return RuleEngine(
        [(path, rule) for path, pack in packs for rule in pack.rules],
        pack_names={path: pack.pack for path, pack in packs},
    )


__all__ = [
    "CompiledRule",
    "RuleEngine",
    "ScanState",
    "default_engine",
    "known_confidences",
    "load_engine",
]


def listed_ranks(text: str) -> list[int]:
    """The ranks a ``rank_list`` field lists ("0, 2", "1,3"), in order, each once, at most
    :data:`MAX_LISTED_RANKS`; none for anything that is not such a list."""
    out: list[int] = []
    for part in text.split(","):
        token = part.strip()
        if not is_ascii_digits(token) or len(token) > 6:
            return []
        if int(token) not in out:
            out.append(int(token))
    return out[:MAX_LISTED_RANKS]
