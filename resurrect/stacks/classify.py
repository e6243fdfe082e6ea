"""Victims and culprits: where each rank's main thread is when a job stopped progressing.

A rank whose main thread is inside a collective or barrier (torch.distributed's Python API,
c10d/gloo/NCCL native frames, DDP's reducer waiting for its all-reduce) waits for its peers:
a *victim*. A rank anywhere else while its peers wait is the *culprit*: stopped (state ``T``),
in uninterruptible sleep (``D``), in a data loader, a CUDA synchronisation, a lock, a sleep,
or plain Python code. Markers are data below, one table per kind; the first kind that
matches, in table order, names the place.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Literal

from resurrect.stacks.flight_recorder import Behind, LastCollective, behind_ranks
from resurrect.stacks.pyspy_text import Frame, StackDump

Place = Literal[
    "collective",
    "stopped",
    "disk_wait",
    "dataloader",
    "cuda",
    "lock",
    "sleep",
    "elsewhere",
    "behind",  # its last collective is behind its peers' (Flight Recorder)
    "unknown",
]

# (place, substrings of a frame's "function (where)" text that mean it); first match wins.
PLACE_MARKERS: tuple[tuple[Place, tuple[str, ...]], ...] = (
    (
        "collective",
        (
            "torch/distributed/distributed_c10d.py",
            "torch/distributed/rendezvous.py",
            "c10d::",
            "gloo::",
            "ProcessGroupNCCL",
            "ProcessGroupGloo",
            "ncclKernel",
            "ncclGroupEnd",
            "ncclAllReduce",
            "Reducer::finalize_backward",
            "Work::wait",
        ),
    ),
    ("dataloader", ("torch/utils/data/", "_MultiProcessingDataLoaderIter")),
    (
        "cuda",
        (
            "torch/cuda/__init__.py",
            "cudaStreamSynchronize",
            "cudaDeviceSynchronize",
            "cuStreamSynchronize",
            "cudaMemcpy",
            "cuCtxSynchronize",
        ),
    ),
    ("lock", ("threading.py", "pthread_mutex_lock", "__lll_lock_wait", "futex_wait")),
    ("sleep", ("clock_nanosleep", "pysleep", "time_sleep")),
)


@dataclass(frozen=True, slots=True)
class RankStack:
    """One rank's process as found on its node: what it is, where it is, its raw dump."""

    rank: int | None
    node: str | None
    pid: int
    state: str  # /proc/PID/stat state letter: R, S, D, T, t, Z, ...
    dump: StackDump | None
    dump_text: str = ""
    error: str = ""
    world_size: int | None = None  # as the rank's environment says (WORLD_SIZE)
    # its Flight Recorder dump: the last collective per process group, or why none
    collectives: tuple[LastCollective, ...] = ()
    flight_recorder_note: str = ""
    dump_note: str = ""  # what was cut from its stack text to bound a probe's answer


@dataclass(frozen=True, slots=True)
class RankPlace:
    rank: int | None
    node: str | None
    pid: int
    place: Place
    frame: str  # the innermost frame that placed it (or the top frame)


def frame_text(frame: Frame) -> str:
    return f"{frame.function} ({frame.where})"


def place_of(stack: RankStack) -> RankPlace:
    """Where one rank is. A stopped or uninterruptible process is placed by its state first:
    its stack shows where it stopped, not that it waits for anyone."""
    main = stack.dump.main_thread() if stack.dump is not None else None
    frames = main.frames if main is not None else []
    top = frame_text(frames[0]) if frames else ""
    if stack.state in ("T", "t"):
        return RankPlace(stack.rank, stack.node, stack.pid, "stopped", top)
    if stack.state == "D":
        return RankPlace(stack.rank, stack.node, stack.pid, "disk_wait", top)
    if not frames:
        return RankPlace(stack.rank, stack.node, stack.pid, "unknown", "")
    for place, markers in PLACE_MARKERS:
        for frame in frames:
            text = frame_text(frame)
            if any(marker in text for marker in markers):
                return RankPlace(stack.rank, stack.node, stack.pid, place, text)
    first_python = next((f for f in frames if not f.native), frames[0])
    return RankPlace(stack.rank, stack.node, stack.pid, "elsewhere", frame_text(first_python))


@dataclass(frozen=True, slots=True)
class StackVerdict:
    """What the stacks of a job's ranks say together."""

    places: list[RankPlace]
    victims: list[RankPlace] = field(default_factory=list)
    culprits: list[RankPlace] = field(default_factory=list)
    summary: str = ""
    missing: list[int] = field(default_factory=list)  # ranks of the world not running

    @property
    def ranks_seen(self) -> int:
        return len([p for p in self.places if p.place != "unknown"])

    @property
    def culprit_stopped(self) -> bool:
        """A culprit is stopped (state T): it cannot be busy; one look is enough."""
        return any(c.place == "stopped" for c in self.culprits)

    def signature(self) -> tuple[tuple[tuple[int | None, str, str], ...], tuple[int | None, ...]]:
        """Who is where: equal in two looks a moment apart means nobody moved (a rank that is
        working, e.g. rank 0 alone in an evaluation, shows other frames each time)."""
        return (
            tuple((c.rank, c.place, c.frame) for c in self.culprits),
            tuple(v.rank for v in self.victims),
        )


# Which kind of culprit is the likelier cause when several ranks are outside collectives.
_CULPRIT_ORDER: dict[Place, int] = {
    "stopped": 0,
    "disk_wait": 1,
    "cuda": 2,
    "dataloader": 3,
    "lock": 4,
    "sleep": 5,
    "elsewhere": 6,
    "behind": 7,
}


def judge(stacks: list[RankStack]) -> StackVerdict:
    """Victims are ranks in a collective; when some ranks wait and others do not, the others
    are the culprits (the likeliest first)."""
    places = sorted((place_of(s) for s in stacks), key=lambda p: (p.rank is None, p.rank or 0))
    worlds = [s.world_size for s in stacks if s.world_size]
    found = {s.rank for s in stacks}
    missing = sorted(set(range(max(worlds))) - found) if worlds else []
    if missing:
        summary = (
            f"ranks {missing} of {max(worlds)} are not running (a lost node or a crashed"
            " process: not a hang to judge from stacks)"
        )
        return StackVerdict(places, [], [], summary, missing)
    victims = [p for p in places if p.place == "collective"]
    others = [p for p in places if p.place not in ("collective", "unknown")]
    if not (victims and others):
        by_flight_recorder = _judge_by_flight_recorder(stacks, places)
        if by_flight_recorder is not None:
            return by_flight_recorder
    if not victims:
        summary = (
            f"no rank waits in a collective ({len(others)} busy elsewhere)"
            if others
            else "no rank's stack could be read"
        )
        return StackVerdict(places, [], [], summary)
    if not others:
        return StackVerdict(
            places,
            victims,
            [],
            f"all {len(victims)} ranks wait in a collective: no culprit among them",
        )
    culprits = sorted(others, key=lambda p: (_CULPRIT_ORDER.get(p.place, 9), p.rank or 0))
    names = ", ".join(f"rank {c.rank} on {c.node} ({c.place}: {c.frame})" for c in culprits)
    return StackVerdict(
        places,
        victims,
        culprits,
        f"{len(victims)} rank(s) wait in a collective for {names}",
    )


def _judge_by_flight_recorder(
    stacks: list[RankStack], places: list[RankPlace]
) -> StackVerdict | None:
    """When the stacks name no culprit (NCCL: every main thread in a CUDA synchronisation),
    the ranks' Flight Recorder dumps may: a rank whose last collective is behind its peers'
    never entered the one they wait in. It is the culprit, its peers the victims."""
    behind = behind_ranks([c for s in stacks for c in s.collectives])
    if not behind:
        return None
    first: dict[int, Behind] = {}
    for b in behind:
        first.setdefault(b.rank, b)
    culprits = [
        RankPlace(p.rank, p.node, p.pid, "behind", first[p.rank].describe())
        for p in places
        if p.rank in first
    ]
    victims = [p for p in places if p.rank not in first and p.place != "unknown"]
    if not culprits or not victims:
        return None
    names = ", ".join(f"rank {c.rank} on {c.node} ({c.frame})" for c in culprits)
    by_pid = {c.pid: c for c in culprits}
    return StackVerdict(
        [by_pid.get(p.pid, p) for p in places],
        victims,
        culprits,
        f"{len(victims)} rank(s) wait for {names}",
    )
