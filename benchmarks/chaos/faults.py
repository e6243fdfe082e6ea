"""The fault kinds the chaos soak injects, as data: what each hits, what resurrect must do
about it, and how long it lasts. How a kind is injected lives in ``inject.py``."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

# What the kind hits: one job (its ranks, its output, its checkpoints), one node (slurmd and
# the node's agent, with every job step on it), or one of resurrect's own parts.
Layer = Literal["job", "node", "service"]
# What resurrect must do:
#   recover       the job is requeued (in place or elsewhere) and ends bit-equal
#   stop          the job is stopped with the fault named (an application fault)
#   left_alone    the job (not opted in) is never requeued, held or drained for
#   no_drain      nothing is drained for it; the job still ends bit-equal
#   survive       a part of resurrect fails: every invariant still holds
Expectation = Literal["recover", "stop", "left_alone", "no_drain", "survive"]
# Which job the fault picks: a running opted-in job, a running job that is not opted in, a
# job whose recovery is in flight, or none (a service part).
Target = Literal["opted_in", "not_opted_in", "recovering", "none"]
# Where the kind can be injected: on any local cluster, or only on hosts in namespaces
# (start.sh --hosts netns: a link to cut, a host to freeze or crash)
Hosts = Literal["any", "netns"]


@dataclass(frozen=True)
class FaultKind:
    """One kind of injected fault."""

    name: str
    layer: Layer
    target: Target
    expect: Expectation
    # an injection of this kind is a fault on its node: resurrect may drain that node
    node_fault: bool
    # seconds the fault lasts before the soak undoes it (0: instant, nothing to undo)
    duration_s: float
    # relative frequency in the schedule
    weight: int
    what: str
    hosts: Hosts = "any"


KINDS: tuple[FaultKind, ...] = (
    FaultKind(
        "node_loss",
        "node",
        "opted_in",
        "recover",
        True,
        0,
        3,
        "SIGKILL the node's slurmd, its agent and every process of its job steps",
    ),
    FaultKind(
        "gpu_fatal",
        "node",
        "opted_in",
        "recover",
        True,
        0,
        2,
        "a rank's node prints an uncorrectable ECC error and its agent's NVML reports"
        " Xid 48 on GPU 0",
    ),
    FaultKind(
        "rank_hang",
        "job",
        "opted_in",
        "recover",
        False,
        0,
        2,
        "SIGSTOP one rank between two saves: its peers block in gloo",
    ),
    FaultKind(
        "straggler",
        "job",
        "opted_in",
        "no_drain",
        False,
        40,
        1,
        "one rank runs 1/4 of the time (SIGSTOP 150 ms, SIGCONT 50 ms) for a while",
    ),
    FaultKind(
        "torn_checkpoint",
        "node",
        "opted_in",
        "recover",
        True,
        0,
        2,
        "truncate the largest shard of the newest checkpoint, then lose the node",
    ),
    FaultKind(
        "fake_xid",
        "job",
        "opted_in",
        "no_drain",
        False,
        0,
        2,
        "the job prints a kernel-style Xid 79 line; no agent confirms it",
    ),
    FaultKind(
        "app_exception",
        "job",
        "opted_in",
        "stop",
        False,
        0,
        1,
        "the job prints a Python traceback ending in ValueError and its rank exits 1",
    ),
    FaultKind(
        "second_fault",
        "node",
        "recovering",
        "recover",
        True,
        0,
        1,
        "lose a node of a job whose recovery is still running",
    ),
    FaultKind(
        "not_opted_in",
        "job",
        "not_opted_in",
        "left_alone",
        False,
        0,
        2,
        "a job that did not opt in prints a fatal GPU line and loses a rank",
    ),
    FaultKind(
        "worker_kill",
        "service",
        "none",
        "survive",
        False,
        8,
        2,
        "SIGKILL the worker process; restart it after a while",
    ),
    FaultKind(
        "watcher_kill",
        "service",
        "none",
        "survive",
        False,
        8,
        2,
        "SIGKILL the watcher process (Slurm watcher, log follower, liveness collector)",
    ),
    FaultKind(
        "agent_kill",
        "service",
        "none",
        "survive",
        False,
        10,
        2,
        "SIGKILL one node's agent; restart it after a while (its node stays healthy)",
    ),
    FaultKind(
        "temporal_kill",
        "service",
        "none",
        "survive",
        False,
        8,
        1,
        "SIGKILL the Temporal server; restart it on its database file",
    ),
    FaultKind(
        "slurmctld_restart",
        "service",
        "none",
        "survive",
        False,
        5,
        1,
        "stop slurmctld (state saved) and start it again",
    ),
    FaultKind(
        "liveness_drop",
        "service",
        "none",
        "survive",
        False,
        12,
        1,
        "drop every datagram to the liveness collector for a while (tc netem on lo)",
    ),
    FaultKind(
        "launch_failure",
        "node",
        "opted_in",
        "recover",
        True,
        60,
        0,  # drawn when named (--kinds): it would change the suite's seeded schedules
        "an idle node's Prolog fails for a while: the job launched there is requeued and held"
        " by slurmctld and the node drained by it; then the operator mends the prolog",
    ),
    FaultKind(
        "state_disk_full",
        "service",
        "none",
        "survive",
        False,
        15,
        1,
        "fill resurrect's state directory's file system (a tmpfs) for a while",
    ),
)

# Faults of hosts in namespaces: a cut link, a frozen or crashed host, a lossy link.
HOST_KINDS: tuple[FaultKind, ...] = (
    FaultKind(
        "partition",
        "node",
        "opted_in",
        "recover",
        True,
        45,
        2,
        "cut a node of a running job from the controller both ways for longer than the"
        " fencing lease; its processes live on; heal it after",
        "netns",
    ),
    FaultKind(
        "partition_one_way",
        "node",
        "opted_in",
        "recover",
        True,
        45,
        1,
        "drop only what a node of a running job sends to the controller; heal it after",
        "netns",
    ),
    FaultKind(
        "partition_short",
        "node",
        "opted_in",
        "no_drain",
        False,
        2,
        1,
        "cut a node of a running job from the controller for less than the silence grace",
        "netns",
    ),
    FaultKind(
        "partition_forever",
        "node",
        "opted_in",
        "recover",
        True,
        0,
        0,
        "cut a node of a running job from the controller until the soak ends (weight 0:"
        " only when named); it must stay drained with a reason saying it is silent",
        "netns",
    ),
    FaultKind(
        "agent_partition",
        "node",
        "none",
        "no_drain",
        False,
        15,
        1,
        "drop only a node agent's datagrams to the liveness collector (its heartbeats fall"
        " back to Temporal)",
        "netns",
    ),
    FaultKind(
        "worker_partition",
        "service",
        "none",
        "survive",
        False,
        10,
        1,
        "cut the worker's host from Temporal's port for a while",
        "netns",
    ),
    FaultKind(
        "host_freeze",
        "node",
        "opted_in",
        "recover",
        True,
        30,
        2,
        "freeze every process of a running job's node's host (cgroup freezer); thaw later",
        "netns",
    ),
    FaultKind(
        "host_crash",
        "node",
        "opted_in",
        "recover",
        True,
        0,
        2,
        "SIGKILL every process of a running job's node's host at once; the operator starts"
        " slurmd and the agent again once it is drained",
        "netns",
    ),
    FaultKind(
        "lossy_link",
        "node",
        "opted_in",
        "survive",
        True,
        30,
        1,
        "lose 20 % of the packets each way on a running job's node's link for a while (a"
        " faulty link: resurrect may drain the node when its agent falls silent and Slurm"
        " agrees; every job must still end well)",
        "netns",
    ),
)

ALL_KINDS: tuple[FaultKind, ...] = KINDS + HOST_KINDS

BY_NAME: dict[str, FaultKind] = {kind.name: kind for kind in ALL_KINDS}

# Kinds of the list that the soak does not inject, and why.
NOT_INJECTED: dict[str, str] = {}


def kinds_for(hosts: str) -> list[FaultKind]:
    """The kinds a soak on ``hosts`` (``local`` or ``netns``) injects by default."""
    return [k for k in ALL_KINDS if k.weight > 0 and (k.hosts == "any" or hosts == "netns")]


def kind(name: str) -> FaultKind:
    """The kind called ``name`` (KeyError for an unknown one)."""
    return BY_NAME[name]
