"""The lemon record, read and written: each node's incidents live in its repair workflow
(``NodeRepairState.incidents``), the same record as its drains, returns and probation.

* :func:`report_incidents`: a recovery's incidents, one signal-with-start per node. Job
  output alone weighs nothing, so it is not recorded at all (a job cannot crowd a node's
  record either).
* :func:`read_records`: the repair states of the nodes that have a score, found through
  the search attribute ``ResurrectLemonScore`` (one visibility list, :func:`list_scored`,
  then a query each, :func:`read_states`).
* :func:`score_records`: their scores now, under the configured rules, with incidents not yet
  in the records (this recovery's own) merged in.
"""

from __future__ import annotations

import asyncio
from collections.abc import Collection, Mapping, Sequence
from datetime import datetime

from temporalio.client import Client

from resurrect.carry_over import carry_over
from resurrect.config import ResurrectConfig
from resurrect.contracts.workflow_ids import node_repair_workflow_id
from resurrect.contracts.workflow_names import NODE_REPAIR_WORKFLOW
from resurrect.lemons.models import LemonRules, LemonScore, NodeIncident
from resurrect.lemons.score import lemon_score, out_of_service, weight
from resurrect.operator.models import NodeIncidentReport, NodeRepairState
from resurrect.operator.repair_client import node_state, report_incident
from resurrect.temporal.search_attributes import LEMON_SCORE

# The most nodes with a score read at once (the highest-scored cluster has far fewer).
MAX_NODES_READ = 1024
# What an assessment carries: the lemons (and nodes implicated now), their latest incidents.
MAX_NODES_CARRIED = 64
INCIDENTS_CARRIED = 3


def lemon_rules(config: ResurrectConfig) -> LemonRules:
    return carry_over(config.lemons, LemonRules)


def lemons_enabled(config: ResurrectConfig) -> bool:
    """Lemon records are kept: lemons on, and the repair workflows that keep them."""
    return config.lemons.enabled and config.repair.enabled


async def report_incidents(
    client: Client | None, config: ResurrectConfig, incidents: Mapping[str, NodeIncident]
) -> list[str]:
    """Record ``incidents`` (node -> incident) in the nodes' records; the nodes recorded."""
    if client is None or not lemons_enabled(config):
        return []
    rules = lemon_rules(config)
    weighed = {n: i for n, i in incidents.items() if weight(i.tier, rules) > 0}
    await asyncio.gather(
        *(
            report_incident(client, config, node, NodeIncidentReport(incident=item, rules=rules))
            for node, item in weighed.items()
        )
    )
    return sorted(weighed)


async def read_records(
    client: Client, config: ResurrectConfig, also: Sequence[str] = ()
) -> dict[str, NodeRepairState]:
    """The repair states of the cluster's nodes with a lemon score, and of the nodes
    ``also`` names (those with a repair workflow)."""
    listed = await list_scored(client, config)
    return await read_states(client, config, sorted({*listed, *also}))


async def list_scored(client: Client, config: ResurrectConfig) -> dict[str, float]:
    """The cluster's nodes with a lemon score (one visibility list), each with the score
    its repair workflow recorded at its latest incident (``ResurrectLemonScore``): a node
    whose recorded score is unchanged has had no incident since."""
    prefix = node_repair_workflow_id(config.cluster.name, "")
    query = (
        f"WorkflowType = '{NODE_REPAIR_WORKFLOW}' AND ExecutionStatus = 'Running'"
        f" AND {LEMON_SCORE.name} > 0"
    )
    listed: dict[str, float] = {}
    async for execution in client.list_workflows(query, limit=MAX_NODES_READ):
        if execution.id.startswith(prefix):
            score = execution.typed_search_attributes.get(LEMON_SCORE)
            listed[execution.id[len(prefix) :]] = 0.0 if score is None else score
    return listed


async def read_states(
    client: Client, config: ResurrectConfig, names: Collection[str]
) -> dict[str, NodeRepairState]:
    """The repair states of ``names`` (a query each; those without a repair workflow left
    out)."""
    cluster = config.cluster.name
    ordered = sorted(names)
    states = await asyncio.gather(*(node_state(client, cluster, n, config) for n in ordered))
    return {n: s for n, s in zip(ordered, states, strict=True) if s is not None}


def score_records(
    records: Mapping[str, NodeRepairState],
    rules: LemonRules,
    now: datetime,
    adding: Mapping[str, NodeIncident] | None = None,
) -> list[LemonScore]:
    """Each node's score now (highest first), with ``adding`` (node -> incident) merged in
    where its record does not hold that incident yet."""
    adding = {n: i for n, i in (adding or {}).items() if weight(i.tier, rules) > 0}
    scores = []
    for node in sorted(set(records) | set(adding)):
        state = records.get(node)
        incidents = list(state.incidents) if state is not None else []
        extra = adding.get(node)
        if extra is not None and all(i.incident != extra.incident for i in incidents):
            incidents.append(extra)
        events = state.events if state is not None else []
        scores.append(lemon_score(node, incidents, out_of_service(events), now, rules))
    return sorted(scores, key=lambda s: (-s.score, s.node))


def compact(scores: Sequence[LemonScore], keep: Collection[str] = ()) -> list[LemonScore]:
    """What a recovery's assessment carries (it is stored in the recovery's history): the
    lemons and the nodes in ``keep``, each with its latest few incidents."""
    return [
        s.model_copy(update={"incidents": s.incidents[:INCIDENTS_CARRIED]})
        for s in scores
        if s.lemon or s.drain_due or s.node in keep
    ][:MAX_NODES_CARRIED]


def known_to_slurm(
    scores: Sequence[LemonScore], job_nodes: Collection[str], existing: Collection[str]
) -> list[LemonScore]:
    """``scores`` without the nodes Slurm no longer knows (a lemon taken out of the cluster
    keeps its record; excluding it from a requeue would make Slurm refuse the requeue)."""
    return [s for s in scores if s.node in job_nodes or s.node in existing]
