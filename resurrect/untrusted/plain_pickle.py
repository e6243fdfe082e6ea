"""A pickle reader that builds plain data only, by an allow-list of opcodes.

:func:`load_plain` interprets a pickle (protocols 0 to 5, binary opcodes) itself, one opcode
at a time, and builds only ``None``, booleans, integers, floats, strings, lists, tuples and
dicts whose keys are strings. Everything else is refused with :class:`PlainPickleError`:
any global but PyTorch's container type tags (read as the value they tag), objects, sets,
bytes, buffers, extensions, persistent ids, a dict key that is not a string.

String keys matter: Python hashes strings with a per-process random key, but integers,
floats and tuples of them hash the same everywhere, so a dict of crafted integer keys that
all hash alike costs quadratic time to build (and the standard unpickler builds it in one C
call that holds the GIL). Every opcode consumes at least one byte of input and does a
bounded amount of work, so the cost is linear in the input's size.

The same machine reads richer formats through :class:`Rules`: a reader of one format (the
DCP ``.metadata`` reader) says which globals exist, what calling one (REDUCE), making one
(NEWOBJ) and filling one (BUILD) builds, and which dict keys and set members are allowed
besides strings (objects hashed by identity, never values whose hash a file can choose).
:func:`load_with` also stops a parse past a CPU-time budget
(:class:`PickleTooCostly`), so a file can cost its reader seconds at most.
"""

from __future__ import annotations

import struct
import time
from dataclasses import dataclass


class PlainPickleError(ValueError):
    """The pickle holds something other than plain data, or is malformed."""


class PickleTooCostly(PlainPickleError):
    """The pickle is refused for what reading it would cost, not for its shape: a dict key
    or set member whose hash the file could choose, or a parse past its CPU-time budget."""


# PyTorch's pickler tags containers with these; each returns its first argument
# (``torch/jit/_pickle.py``).
_TYPE_TAGS = frozenset(
    ("torch.jit._pickle", name)
    for name in ("restore_type_tag", "build_intlist", "build_doublelist", "build_boollist")
)
MAX_TEXT_INT_DIGITS = 4300  # Python's own limit for int(str)
MAX_LONG_BYTES = 1024


@dataclass(frozen=True, slots=True)
class _TypeTag:
    """A PyTorch type tag: applied (REDUCE), the value it tags."""

    name: str


class _Mark:
    """The marker MARK pushes."""


_MARK = _Mark()

#: Opcodes between two looks at the CPU clock (a few milliseconds of work).
_CLOCK_EVERY = 4096


class Rules:
    """What a parse may build besides plain data. These defaults are the plain-data reader's:
    PyTorch's type tags only, no objects, no sets, string keys only."""

    #: Whether EMPTY_SET, ADDITEMS and FROZENSET may build sets (members as dict keys).
    sets = False

    def find_global(self, module: str, name: str) -> object:
        """What GLOBAL/STACK_GLOBAL ``module.name`` pushes; refuse with PlainPickleError."""
        if (module, name) not in _TYPE_TAGS:
            raise PlainPickleError(f"global {module[:80]}.{name[:80]} refused")
        return _TypeTag(name)

    def call(self, function: object, args: tuple[object, ...]) -> object:
        """What REDUCE of ``function`` on ``args`` pushes."""
        if not isinstance(function, _TypeTag) or not args:
            raise PlainPickleError("REDUCE of something other than a PyTorch type tag")
        return args[0]

    def new_object(self, cls: object, args: tuple[object, ...]) -> object:
        """What NEWOBJ of ``cls`` on ``args`` pushes."""
        raise PlainPickleError("pickle opcode NEWOBJ refused (not plain data)")

    def build(self, target: object, state: object) -> None:
        """BUILD: fill ``target`` with ``state``."""
        raise PlainPickleError("pickle opcode BUILD refused (not plain data)")

    def key_allowed(self, key: object) -> bool:
        """Whether ``key`` may be a dict key or a set member (its hash cost is bounded)."""
        return isinstance(key, str)


class _Reader:
    def __init__(self, data: bytes) -> None:
        self.data = bytes(data)
        self.at = 0

    def take(self, count: int) -> bytes:
        if count < 0 or self.at + count > len(self.data):
            raise PlainPickleError("truncated pickle")
        chunk = self.data[self.at : self.at + count]
        self.at += count
        return chunk

    def line(self, longest: int = MAX_TEXT_INT_DIGITS + 8) -> bytes:
        end = self.data.find(b"\n", self.at, self.at + longest + 1)
        if end < 0:
            raise PlainPickleError("unterminated or overlong text argument")
        return self.take(end + 1 - self.at)[:-1]

    def unsigned(self, size: int) -> int:
        return int.from_bytes(self.take(size), "little")


def _text(raw: bytes) -> str:
    try:
        return raw.decode("utf-8", "surrogatepass")
    except UnicodeDecodeError:
        raise PlainPickleError("a string that is not UTF-8") from None


class _Machine:
    """The pickle stack machine: the plain-data opcodes, and objects as ``rules`` allow."""

    def __init__(self, data: bytes, rules: Rules, cpu_budget_s: float | None = None) -> None:
        self.reader = _Reader(data)
        self.rules = rules
        self.stack: list[object] = []
        self.marks: list[int] = []
        self.memo: dict[int, object] = {}
        self.cpu_budget_s = cpu_budget_s
        self.cpu_deadline = None if cpu_budget_s is None else time.process_time() + cpu_budget_s

    def pop(self) -> object:
        if not self.stack or (self.marks and len(self.stack) <= self.marks[-1]):
            raise PlainPickleError("stack underflow")
        return self.stack.pop()

    def top(self) -> object:
        if not self.stack:
            raise PlainPickleError("stack underflow")
        return self.stack[-1]

    def pop_mark(self) -> list[object]:
        if not self.marks:
            raise PlainPickleError("no MARK")
        start = self.marks.pop()
        items = self.stack[start:]
        del self.stack[start:]
        return items

    def set_items(self, target: object, items: list[object]) -> None:
        if not isinstance(target, dict) or len(items) % 2:
            raise PlainPickleError("SETITEMS on something other than a dict")
        for index in range(0, len(items), 2):
            target[self.key(items[index])] = _plain(items[index + 1])

    def key(self, key: object, what: str = "dict key") -> object:
        if not self.rules.key_allowed(key):
            raise PickleTooCostly(f"a {what} of type {type(key).__name__}: refused")
        return key

    def add_items(self, target: object, items: list[object]) -> None:
        if not self.rules.sets or not isinstance(target, set):
            raise PlainPickleError("ADDITEMS on something other than a set")
        target.update(self.key(_plain(item), "set member") for item in items)

    def append_items(self, target: object, items: list[object]) -> None:
        if not isinstance(target, list):
            raise PlainPickleError("APPENDS on something other than a list")
        target.extend(_plain(item) for item in items)

    def memo_get(self, index: int) -> None:
        if index not in self.memo:
            raise PlainPickleError("memo entry missing")
        self.stack.append(self.memo[index])

    def memo_put(self, index: int) -> None:
        self.memo[index] = self.top()

    def global_(self, module: str, name: str) -> None:
        self.stack.append(self.rules.find_global(module, name))

    def reduce(self) -> None:
        args = self.pop()
        function = self.pop()
        if not isinstance(args, tuple):
            raise PlainPickleError("REDUCE with arguments that are not a tuple")
        self.stack.append(self.rules.call(function, args))

    def new_object(self) -> None:
        args = self.pop()
        cls = self.pop()
        if not isinstance(args, tuple):
            raise PlainPickleError("NEWOBJ with arguments that are not a tuple")
        self.stack.append(self.rules.new_object(cls, args))

    def build(self) -> None:
        state = self.pop()
        self.rules.build(self.top(), state)

    def frozen_set(self) -> None:
        if not self.rules.sets:
            raise PlainPickleError("pickle opcode FROZENSET refused (not plain data)")
        self.stack.append(
            frozenset(self.key(_plain(item), "set member") for item in self.pop_mark())
        )

    def check_clock(self) -> None:
        if self.cpu_deadline is not None and time.process_time() > self.cpu_deadline:
            raise PickleTooCostly(f"reading it took more than {self.cpu_budget_s:g} CPU seconds")

    def run(self) -> object:  # one branch per opcode
        read = self.reader
        push = self.stack.append
        count = 0
        while True:
            count += 1
            if count % _CLOCK_EVERY == 0:
                self.check_clock()
            code = read.take(1)
            if code == b".":  # STOP
                if len(self.stack) != 1 or self.marks:
                    raise PlainPickleError("STOP with a malformed stack")
                return _plain(self.stack[0])
            elif code == b"\x80":  # PROTO
                if read.unsigned(1) > 5:
                    raise PlainPickleError("unknown pickle protocol")
            elif code == b"\x95":  # FRAME
                read.take(8)
            elif code == b"(":
                self.marks.append(len(self.stack))
            elif code == b"0":  # POP
                self.pop()
            elif code == b"1":  # POP_MARK
                self.pop_mark()
            elif code == b"2":  # DUP
                push(self.top())
            elif code == b"N":
                push(None)
            elif code == b"\x88":
                push(True)
            elif code == b"\x89":
                push(False)
            elif code == b"J":  # BININT
                push(struct.unpack("<i", read.take(4))[0])
            elif code == b"K":  # BININT1
                push(read.unsigned(1))
            elif code == b"M":  # BININT2
                push(read.unsigned(2))
            elif code in (b"\x8a", b"\x8b"):  # LONG1, LONG4
                size = read.unsigned(1 if code == b"\x8a" else 4)
                if size > MAX_LONG_BYTES:
                    raise PlainPickleError("an integer too long")
                push(int.from_bytes(read.take(size), "little", signed=True))
            elif code in (b"I", b"L"):  # INT, LONG (text)
                push(_text_int(read.line()))
            elif code == b"G":  # BINFLOAT
                push(struct.unpack(">d", read.take(8))[0])
            elif code == b"F":  # FLOAT (text)
                try:
                    push(float(read.line()))
                except ValueError:
                    raise PlainPickleError("a malformed float") from None
            elif code == b"X":  # BINUNICODE
                push(_text(read.take(read.unsigned(4))))
            elif code == b"\x8c":  # SHORT_BINUNICODE
                push(_text(read.take(read.unsigned(1))))
            elif code == b"\x8d":  # BINUNICODE8
                push(_text(read.take(read.unsigned(8))))
            elif code == b"V":  # UNICODE (protocol 0)
                try:
                    push(read.line(len(read.data)).decode("raw-unicode-escape"))
                except UnicodeDecodeError:
                    raise PlainPickleError("a malformed string") from None
            elif code == b"}":
                push({})
            elif code == b"d":  # DICT
                target: dict[str, object] = {}
                self.set_items(target, self.pop_mark())
                push(target)
            elif code == b"s":  # SETITEM
                value, key = self.pop(), self.pop()
                self.set_items(self.top(), [key, value])
            elif code == b"u":  # SETITEMS
                items = self.pop_mark()
                self.set_items(self.top(), items)
            elif code == b"]":
                push([])
            elif code == b"l":  # LIST
                push(self.pop_mark())
            elif code == b"a":  # APPEND
                value = self.pop()
                self.append_items(self.top(), [value])
            elif code == b"e":  # APPENDS
                items = self.pop_mark()
                self.append_items(self.top(), items)
            elif code == b")":
                push(())
            elif code == b"t":  # TUPLE
                push(tuple(self.pop_mark()))
            elif code in (b"\x85", b"\x86", b"\x87"):  # TUPLE1..3
                count = code[0] - 0x84
                items = [self.pop() for _ in range(count)]
                push(tuple(reversed(items)))
            elif code == b"q":  # BINPUT
                self.memo_put(read.unsigned(1))
            elif code == b"r":  # LONG_BINPUT
                self.memo_put(read.unsigned(4))
            elif code == b"\x94":  # MEMOIZE
                self.memo_put(len(self.memo))
            elif code == b"p":  # PUT (text)
                self.memo_put(_text_int(read.line()))
            elif code == b"h":  # BINGET
                self.memo_get(read.unsigned(1))
            elif code == b"j":  # LONG_BINGET
                self.memo_get(read.unsigned(4))
            elif code == b"g":  # GET (text)
                self.memo_get(_text_int(read.line()))
            elif code == b"c":  # GLOBAL
                module = read.line().decode("ascii", "replace")
                self.global_(module, read.line().decode("ascii", "replace"))
            elif code == b"\x93":  # STACK_GLOBAL
                named, within = self.pop(), self.pop()
                if not isinstance(within, str) or not isinstance(named, str):
                    raise PlainPickleError("STACK_GLOBAL of non-strings")
                self.global_(within, named)
            elif code == b"R":
                self.reduce()
            elif code == b"\x81":  # NEWOBJ
                self.new_object()
            elif code == b"b":  # BUILD
                self.build()
            elif code == b"\x8f" and self.rules.sets:  # EMPTY_SET
                push(set())
            elif code == b"\x90":  # ADDITEMS
                items = self.pop_mark()
                self.add_items(self.top(), items)
            elif code == b"\x91":  # FROZENSET
                self.frozen_set()
            else:
                raise PlainPickleError(f"pickle opcode {code!r} refused (not plain data)")


def _plain(value: object) -> object:
    """``value``, unless it is a type tag that was never applied."""
    if isinstance(value, _TypeTag):
        raise PlainPickleError(f"a bare global ({value.name}) in the data")
    return value


def _text_int(raw: bytes) -> int:
    text = raw.rstrip(b"L")
    if text == b"00":
        return 0  # protocol 0 writes False as I00
    if text == b"01":
        return 1
    if len(text) > MAX_TEXT_INT_DIGITS:
        raise PlainPickleError("an integer too long")
    try:
        return int(text)
    except ValueError:
        raise PlainPickleError("a malformed integer") from None


def load_plain(data: bytes) -> object:
    """The plain data a pickle holds; :class:`PlainPickleError` for anything else."""
    return _Machine(data, Rules()).run()


def load_with(data: bytes, rules: Rules, *, cpu_budget_s: float | None = None) -> object:
    """What a pickle holds as ``rules`` allow, read in time linear in its size and within
    ``cpu_budget_s`` CPU seconds; :class:`PlainPickleError` for anything else (what
    ``rules`` raise passes through)."""
    return _Machine(data, rules, cpu_budget_s).run()
