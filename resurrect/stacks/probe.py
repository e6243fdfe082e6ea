"""A stack probe: one node's answer to "where are job J's ranks?", as it travels.

The node agent (root on its node) answers it (:func:`probe_here`): every rank process of the
job attempt on the node (the kernel's word: the job's steps, its owner's uid; named after the
agent's own node, never after what a rank's environment says), each read with one bounded
py-spy call, and what NCCL's RAS service there says about the job. The follower asks every
node of a suspected job (:mod:`resurrect.stacks.agent_ranks`) through Temporal: the probe
is a short workflow on the node agent's own task queue (:func:`agent_task_queue`), so the
stacks are in its history too. The answer is plain data: the raw py-spy text per rank,
parsed again by the asker, and each rank's Flight Recorder dump as its last collective per
process group (or why none).
"""

from __future__ import annotations

import logging
import time
from dataclasses import replace

from pydantic import Field

from resurrect.contracts import Contract, Evidence, SignalKind
from resurrect.sensors.node_agent.gpu_activity import LOCAL_GPUS, RankGpu
from resurrect.stacks.classify import RankStack
from resurrect.stacks.collect import collect_job_stacks, job_gpu_activity
from resurrect.stacks.flight_recorder import MAX_COLLECTIVES_PER_RANK, LastCollective
from resurrect.stacks.nccl_ras import query_ras
from resurrect.stacks.processes import job_rank_processes
from resurrect.stacks.pyspy_text import bounded_dump_text, parse_pyspy_dump, wire_bytes
from resurrect.stacks.slurm_job import job_owner_uid

log = logging.getLogger(__name__)
STACK_PROBE_WORKFLOW = "StackProbeWorkflow"
DUMP_STACKS_ACTIVITY = "agent.dump_stacks"
MAX_DUMP_TEXT = 256 << 10  # per rank
MAX_RANKS_PER_NODE = 256
#: The most one probe's answer carries (its JSON): well under Temporal's 2 MiB payload limit
#: (``limit.blobSize.error``), for 256 ranks of any text. Each rank gets an equal share;
#: a rank over its share keeps its main thread's innermost frames first.
MAX_PROBE_RESULT_BYTES = 1 << 20


def agent_task_queue(cluster: str, node: str) -> str:
    """The task queue of one node's agent (its stack probes run there)."""
    return f"resurrect-agent/{cluster}/{node}"


class StackProbeRequest(Contract):
    cluster: str = Field(min_length=1, max_length=200)
    node: str = Field(min_length=1, max_length=200)
    job_id: str = Field(pattern=r"^[0-9]{1,12}(?:_[0-9]{1,12})?$")
    # the job owner's uid (Slurm's, sent by the follower); None: the agent asks Slurm
    owner_uid: int | None = Field(default=None, ge=0)
    # the cluster's SLURM_CONF (the follower's), for machines running several clusters
    slurm_conf: str | None = Field(default=None, max_length=4096)
    restart_count: int | None = Field(default=None, ge=0)
    timeout_s: float = Field(default=15.0, gt=0, le=120)  # per py-spy call
    stacks: bool = True  # read the ranks' stacks (py-spy pauses each rank about a second)
    ras: bool = True  # also ask NCCL's RAS service on the node (with the stacks)
    gpus: bool = True  # the ranks' GPU activity (NVML, Slurm's GPU binding)


class ProbedCollective(Contract):
    """A rank's last collective in one process group (its Flight Recorder dump)."""

    pg_id: str = Field(max_length=200)
    seq: int = Field(ge=1)
    name: str = Field(default="", max_length=200)
    state: str = Field(default="", max_length=20)


class ProbedRank(Contract):
    rank: int | None
    node: str | None
    pid: int
    state: str = Field(max_length=2)
    dump_text: str = Field(default="", max_length=MAX_DUMP_TEXT)
    error: str = Field(default="", max_length=2000)
    world_size: int | None = None
    collectives: list[ProbedCollective] = Field(
        default_factory=list, max_length=MAX_COLLECTIVES_PER_RANK
    )
    flight_recorder_note: str = Field(default="", max_length=2000)
    dump_note: str = Field(default="", max_length=500)  # what was cut to bound the answer


class StackProbeResult(Contract):
    node: str
    ranks: list[ProbedRank] = Field(default_factory=list, max_length=MAX_RANKS_PER_NODE)
    gpus: list[RankGpu] = Field(default_factory=list, max_length=MAX_RANKS_PER_NODE)
    evidence: list[Evidence] = Field(default_factory=list)  # NCCL RAS findings or its note
    took_s: float = 0.0

    def stacks(self) -> list[RankStack]:
        """The ranks' stacks as the classifier reads them."""
        return [
            RankStack(
                r.rank,
                r.node or self.node,
                r.pid,
                r.state,
                parse_pyspy_dump(r.dump_text) if r.dump_text else None,
                r.dump_text,
                r.error,
                r.world_size,
                tuple(
                    LastCollective(r.rank, c.pg_id, c.seq, c.name, c.state)
                    for c in r.collectives
                    if r.rank is not None
                ),
                r.flight_recorder_note,
                r.dump_note,
            )
            for r in self.ranks
        ]

    def rank_gpus(self) -> list[RankGpu]:
        """The ranks' GPUs, each on the node that answered."""
        return [replace(g, node=self.node) for g in self.gpus]


def probe_here(request: StackProbeRequest, here: str | None = None) -> StackProbeResult:
    """Read the stacks of the job's ranks on this node (and NCCL RAS), within bounds.

    ``here``: the agent's own node name (the ranks' node); None: the request's."""
    began = time.monotonic()
    node = here or request.node
    if node != request.node:  # a probe sent to the wrong queue: nothing of another node
        log.warning("stack probe for node %.200s answered on %s: no ranks", request.node, node)
        return StackProbeResult(node=node, took_s=time.monotonic() - began)
    owner = request.owner_uid if request.owner_uid is not None else job_owner_uid(request.job_id)
    stacks = (
        collect_job_stacks(
            request.job_id,
            owner_uid=owner,
            restart_count=request.restart_count,
            timeout_s=request.timeout_s,
            node=node,
            slurm_conf=request.slurm_conf,
        )
        if request.stacks
        else []
    )
    ranks = [
        ProbedRank(
            rank=s.rank,
            node=s.node,
            pid=s.pid,
            state=s.state[:2],
            dump_text=s.dump_text[:MAX_DUMP_TEXT],
            error=s.error[:2000],
            world_size=s.world_size,
            collectives=[
                ProbedCollective(pg_id=c.pg_id, seq=c.seq, name=c.name, state=c.state)
                for c in s.collectives
            ],
            flight_recorder_note=s.flight_recorder_note[:2000],
        )
        for s in stacks[:MAX_RANKS_PER_NODE]
    ]
    evidence: list[Evidence] = []
    if request.ras and ranks:
        ras = query_ras(pids=[r.pid for r in ranks], timeout_s=min(request.timeout_s, 10.0))
        evidence = ras.evidence(request.node)
    gpus = node_gpus(request, owner) if request.gpus else []
    result = StackProbeResult(node=node, gpus=gpus, evidence=evidence)
    return bounded_result(result, ranks, took_s=time.monotonic() - began)


def _wire(model: Contract) -> int:
    return len(model.model_dump_json().encode("utf-8", "surrogatepass"))


def _fit(rank: ProbedRank, share: int) -> ProbedRank:
    """``rank`` within ``share`` bytes of JSON: its notes cut to 200 characters, its Flight
    Recorder collectives to half the share, its stack text to the rest (main thread first);
    ``dump_note`` says what was cut. Each part's cost is computed once."""
    bare = rank.model_copy(update={"dump_text": "", "collectives": []})
    base = _wire(bare)
    text_cost = wire_bytes(rank.dump_text)
    costs = [_wire(c) + 1 for c in rank.collectives]
    if base + text_cost + sum(costs) <= share:
        return rank
    if base > share // 4:
        update = {
            "error": rank.error[:200],
            "flight_recorder_note": rank.flight_recorder_note[:200],
        }
        bare = bare.model_copy(update=update)
        base = _wire(bare)
    kept, spent = 0, 0
    while kept < len(costs) and spent + costs[kept] <= share // 2:
        spent += costs[kept]
        kept += 1
    text = bounded_dump_text(rank.dump_text, max(0, share - base - spent - 600))
    note = f"stack text cut from {len(rank.dump_text):,} to {len(text):,} characters"
    if kept < len(costs):
        note += f", {len(costs) - kept} Flight Recorder group(s) left out"
    note += f" (a probe's answer is bounded to {MAX_PROBE_RESULT_BYTES:,} bytes for all ranks)"
    fitted: dict[str, object] = {
        "dump_text": text,
        "collectives": rank.collectives[:kept],
        "dump_note": note[:500],
    }
    return bare.model_copy(update=fitted)


def bounded_result(
    result: StackProbeResult, ranks: list[ProbedRank], *, took_s: float = 0.0
) -> StackProbeResult:
    """``result`` with ``ranks``, its JSON within :data:`MAX_PROBE_RESULT_BYTES`: each rank
    gets an equal share of what the rest leaves; when any was cut, one note (evidence) says
    how many and why."""
    ranks = ranks[:MAX_RANKS_PER_NODE]
    room = MAX_PROBE_RESULT_BYTES - _wire(result) - 8 * len(ranks) - 1024
    share = max(0, room) // max(1, len(ranks))
    fitted = [_fit(rank, share) for rank in ranks]
    cut = sum(1 for rank in fitted if rank.dump_note)
    evidence = list(result.evidence)
    if cut:
        evidence.append(
            Evidence(
                kind=SignalKind.STACK_DUMP,
                text=f"stack probe on {result.node}: {cut} of {len(ranks)} rank(s) cut to"
                f" {share:,} bytes each (the answer is bounded to {MAX_PROBE_RESULT_BYTES:,}"
                " bytes): each kept its main thread's innermost frames first",
                rule="stack_probe.truncated",
                host=result.node,
                source="sensor",
            )
        )
    return result.model_copy(update={"ranks": fitted, "evidence": evidence, "took_s": took_s})


def node_gpus(request: StackProbeRequest, owner_uid: int | None) -> list[RankGpu]:
    """The GPU activity of the job's ranks on this node (none without NVML or GPUs), on
    the GPUs Slurm gave the job here."""
    gpus = LOCAL_GPUS.read()
    if not gpus:
        return []
    processes = job_rank_processes(
        request.job_id,
        owner_uid=owner_uid,
        restart_count=request.restart_count,
        node=request.node,
        slurm_conf=request.slurm_conf,
    )
    return job_gpu_activity(request.job_id, processes, gpus)[:MAX_RANKS_PER_NODE]
