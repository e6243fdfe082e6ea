"""The rule-pack schema: what a YAML pack may say, validated by pydantic.

A pack is a YAML mapping::

    pack: nccl                      # a name, unique among loaded packs
    description: NCCL and ProcessGroupNCCL messages
    rules:
      - id: nccl.ib_completion_error          # unique across all packs
        description: an InfiniBand work completion failed
        kinds: [job_log]                      # SignalKind values the rule applies to
        literal: ["got completion from peer"] # cheap prefilter: a line must contain one
        pattern: 'NET/IB ?: Got completion from peer (?P<peer>[\\w.:-]+)'
        fault_class: network.fabric
        role: root                            # root | cascade | diagnostic
        confidence: 0.9
        fields: [peer]                        # named groups the rule extracts
        examples:
          match:
            - "node1:12:34 [0] NCCL WARN NET/IB : Got completion from peer 10.0.0.2 ..."
            - text: "..."
              fields: {peer: 10.0.0.2}
          no_match: ["NCCL INFO NET/IB : Using [0]mlx5_0:1/IB"]

Unknown keys are rejected everywhere. ``literal`` strings are matched case-insensitively
against the cleaned line; they must be ASCII, or caseless non-ASCII characters (a shell's
localized message: CJK, kana), so that the line's and the chunk's lower-casing agree, and they
should be specific (every healthy line that contains one costs a regex run). ``pattern`` is a
Python regex searched (not matched) in the line body after launcher prefixes are removed; it
must be free of nested unbounded repeats.
Well-known fields (``rank``, ``host``, ``gpu``/``pci``) also fill the Evidence's own
attributes; a ``rank_list`` field (a comma-separated list, "0, 2") makes the line evidence for
each rank it lists; a ``pid`` field is also filled from NCCL's ``host:pid:tid`` prefix.
``sets_host`` marks a rule whose ``host`` applies to the following lines of the same file (a
shell prompt); ``capture_previous`` attaches the previous non-empty line as field
``previous_line`` (used to measure the silence before a time-limit kill or an interrupt).
"""

from __future__ import annotations

import re
from typing import Generic, Self, TypeVar

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

from resurrect.contracts import EvidenceRole, FaultClass, SignalKind

_ID = re.compile(r"^[a-z0-9][a-z0-9_.-]{1,99}$")


def _caseless_or_ascii(ch: str) -> bool:
    """ASCII, or a character that has no case (a chunk is lower-cased as bytes, where only ASCII
    changes; a caseless character reads the same either way)."""
    return ch.isascii() or (ch.isprintable() and ch.lower() == ch == ch.upper() and ch.isalpha())


class Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class LineExample(Strict):
    """A line a rule must match."""

    text: str


ExampleT = TypeVar("ExampleT", bound=LineExample)


class LineExamples(Strict, Generic[ExampleT]):
    """Lines a rule must match (a bare string stands for the text alone) and must not match."""

    match: list[ExampleT] = Field(min_length=1)
    no_match: list[str] = Field(default_factory=list)

    @field_validator("match", mode="before")
    @classmethod
    def _bare_text(cls, value: object) -> object:
        if isinstance(value, list):
            return [{"text": m} if isinstance(m, str) else m for m in value]
        return value

    def match_examples(self) -> list[ExampleT]:
        return self.match


class MatchExample(LineExample):
    """A line the rule must match, with the fields it must extract (a subset)."""

    fields: dict[str, str] = Field(default_factory=dict)


class Examples(LineExamples[MatchExample]):
    """A log signature's examples."""


class LineRule(Strict):
    """What every rule that recognises a line has: an id, cheap literals, a regex.

    Log signatures (:class:`Rule`) and progress rules
    (:class:`~resurrect.progress.models.ProgressRule`) both build on it.
    """

    id: str
    description: str = ""
    literal: list[str] = Field(min_length=1)
    pattern: str

    @field_validator("id")
    @classmethod
    def _id_format(cls, value: str) -> str:
        if not _ID.match(value):
            raise ValueError("id must be lower-case letters, digits, '.', '_' or '-'")
        return value

    @field_validator("literal")
    @classmethod
    def _literal_caseless(cls, value: list[str]) -> list[str]:
        for lit in value:
            if not lit or not all(_caseless_or_ascii(ch) for ch in lit):
                raise ValueError(
                    f"literal {lit!r} must be non-empty ASCII or caseless characters (CJK, kana)"
                )
        return [lit.lower() for lit in value]

    @field_validator("pattern")
    @classmethod
    def _pattern_compiles(cls, value: str) -> str:
        try:
            re.compile(value)
        except re.error as exc:
            raise ValueError(f"pattern does not compile: {exc}") from exc
        return value


RuleT = TypeVar("RuleT", bound=LineRule)


class LinePack(Strict, Generic[RuleT]):
    """One YAML file of line rules."""

    pack: str
    description: str = ""
    rules: list[RuleT] = Field(min_length=1)


class Rule(LineRule):
    """One log signature: where it applies, what it matches, what it means."""

    kinds: list[SignalKind] = Field(default_factory=lambda: [SignalKind.JOB_LOG], min_length=1)
    fault_class: FaultClass | None = None
    role: EvidenceRole = "diagnostic"
    confidence: float = Field(default=0.5, ge=0.0, le=1.0)
    fields: list[str] = Field(default_factory=list)
    sets_host: bool = False
    capture_previous: bool = False
    whole_line: bool = False
    """The pattern reads the whole cleaned line, launcher prefixes included, for reports whose
    own text looks like a prefix (Horovod's ``6: [...]`` stalled-rank lines)."""
    reports_another_node: bool = False
    """The line is a survivor's report of another node's failure (a step daemon cancelling
    its step "DUE TO NODE FAILURE"): its host is only one the line itself names, never the
    reporter's (its launcher prefix or its file's host)."""
    examples: Examples

    @field_validator("literal", mode="before")
    @classmethod
    def _literal_list(cls, value: object) -> object:
        return [value] if isinstance(value, str) else value

    @model_validator(mode="after")
    def _consistent(self) -> Self:
        groups = set(re.compile(self.pattern).groupindex)
        missing = [f for f in self.fields if f not in groups]
        if missing:
            raise ValueError(f"fields {missing} are not named groups of the pattern")
        if self.role == "root" and self.fault_class is None:
            raise ValueError("a root rule must name its fault_class")
        if self.sets_host and "host" not in groups:
            raise ValueError("sets_host needs a named group 'host'")
        known = set(self.fields) | groups | {"rank", "host", "gpu", "pid"}
        for example in self.examples.match_examples():
            extra = set(example.fields) - known
            if extra:
                raise ValueError(f"example states fields {sorted(extra)} the rule cannot extract")
        return self


class RulePack(LinePack[Rule]):
    """One YAML file of log signatures."""
