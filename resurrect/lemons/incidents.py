"""One recovery's evidence as per-node incidents: which of the job's nodes it implicates,
what kind of fault, and who vouches for it (a pure function).

The nodes and the trust come from the same rules the decision drains with
(:mod:`resurrect.evidence_trust`), so a node is an ``independent`` incident exactly when the
node agent or Slurm names it: for a hardware, fabric or node-loss fault, the culprit nodes
:func:`corroborated_nodes` confirms (the others are ``job_output``); for a hang or a
straggler, the probed culprit with :func:`hardware_evidence` (without it, ``probe``). Only
nodes the job ran on are ever named. Other faults implicate no node.
"""

from __future__ import annotations

from collections.abc import Collection, Sequence
from datetime import datetime

from resurrect.contracts import Diagnosis, Evidence, FaultClass, NodeInfo, SignalKind
from resurrect.evidence_trust import (
    NODE_CLASSES,
    PROBED_CLASSES,
    corroborated_nodes,
    evidence_source,
    hardware_evidence,
    independent_evidence,
    match_job_nodes,
    probed_culprits,
    short_name,
    slurm_troubled,
)
from resurrect.lemons.models import EvidenceTier, IncidentKind, NodeIncident
from resurrect.text_safety import printable

DETAIL_CHARS = 200
_CLASS_KINDS: dict[FaultClass, IncidentKind] = {
    FaultClass.NODE_LOST: "node_lost",
    FaultClass.NETWORK_FABRIC: "fabric",
    FaultClass.GPU_HARDWARE: "gpu",
    FaultClass.JOB_HANG: "hang",
    FaultClass.JOB_STRAGGLER: "straggler",
}
# A rule id naming a finer kind of hardware fault, checked in this order.
_RULE_KINDS: tuple[tuple[str, IncidentKind], ...] = (
    ("nvlink", "nvlink"),
    ("ecc", "ecc"),
    ("row_remap", "ecc"),
    ("retired", "ecc"),
    ("xid.memory", "ecc"),
    ("xid", "xid"),
)


def incident_kind(fault_class: FaultClass, evidence: Sequence[Evidence]) -> IncidentKind:
    """The kind of a node's incident: the finest its vouching evidence names (an NVLink, an
    ECC error, an Xid), else its fault class'."""
    base = _CLASS_KINDS[fault_class]
    if base in ("hang", "straggler", "node_lost"):
        return base
    for item in evidence:
        rule = (item.rule or "").lower()
        for needle, kind in _RULE_KINDS:
            if needle in rule:
                return kind
    return base


def _about(node: str, evidence: Sequence[Evidence]) -> list[Evidence]:
    return [e for e in evidence if e.host and short_name(e.host) == short_name(node)]


def _detail(evidence: Sequence[Evidence], fallback: str) -> str:
    if not evidence:
        return printable(fallback)[:DETAIL_CHARS]
    first = evidence[0]
    source = evidence_source(first).replace("_", " ")
    return printable(f"{source}: {first.rule or first.kind.value}: {first.text}")[:DETAIL_CHARS]


#: Evidence kinds no job can write: NVML's events and readings, Slurm's own states.
_HARDWARE_KINDS = frozenset(
    {SignalKind.GPU_EVENT, SignalKind.GPU_METRIC, SignalKind.SCHEDULER_STATE}
)


def _hardware(
    node: str,
    found: Sequence[Evidence],
    nodes: Sequence[NodeInfo],
    lasting: Collection[str] | None,
) -> bool:
    """Whether evidence no job can write vouches for ``node``'s incident: NVML or Slurm
    evidence naming it, or Slurm marking it lost (``lasting``: :func:`slurm_troubled`) or
    drained by someone else."""
    if any(e.kind in _HARDWARE_KINDS and evidence_source(e) != "job_output" for e in found):
        return True
    return any(short_name(n.name) == short_name(node) and slurm_troubled(n, lasting) for n in nodes)


def node_incidents(
    *,
    incident: str,
    job_id: str,
    at: datetime,
    diagnosis: Diagnosis,
    job_nodes: Sequence[str],
    nodes: Sequence[NodeInfo],
    lasting: Collection[str] | None = None,
    reported: Sequence[Evidence] = (),
    owner: str | None = None,
) -> dict[str, NodeIncident]:
    """The incidents recovery ``incident`` of job ``job_id`` (of ``owner``, Slurm's uid)
    records, by node: one per node of the job that the diagnosis implicates, with the tier
    of the evidence naming it and whether hardware evidence no job can write vouches.
    ``lasting``: as :func:`corroborated_nodes` takes it."""
    fault = diagnosis.fault_class
    tiers: dict[str, tuple[EvidenceTier, list[Evidence]]] = {}
    if fault in PROBED_CLASSES:
        evidence = [*diagnosis.evidence, *reported]
        culprits, _ = match_job_nodes(probed_culprits(diagnosis), job_nodes)
        for node in culprits:
            found = hardware_evidence(evidence, node)
            tiers[node] = ("independent", found) if found else ("probe", [])
    elif fault in NODE_CLASSES:
        independent = independent_evidence(diagnosis)
        named = [
            *diagnosis.culprit_hosts,
            *(
                e.host
                for e in independent
                if e.host and e.role == "root" and e.fault_class in NODE_CLASSES
            ),
        ]
        candidates, _ = match_job_nodes(named, job_nodes)
        confirmed, alone = corroborated_nodes(candidates, diagnosis, nodes, lasting)
        for node in confirmed:
            tiers[node] = ("independent", _about(node, independent))
        for node in alone:
            tiers[node] = ("job_output", _about(node, diagnosis.evidence))
    return {
        node: NodeIncident(
            incident=incident,
            job_id=job_id,
            at=at,
            fault_class=fault.value,
            kind=incident_kind(fault, found) if tier == "independent" else _CLASS_KINDS[fault],
            tier=tier,
            detail=_detail(found, diagnosis.summary or fault.value),
            owner=owner,
            hardware=tier == "independent" and _hardware(node, found, nodes, lasting),
        )
        for node, (tier, found) in tiers.items()
    }
