"""Exclusions that do not pile up: which of a job's excluded nodes to give back.

Every requeue adds the implicated nodes to the job's ``ExcNodeList``. resurrect records
each node it added (in that node's repair workflow, with the time) and, at the job's next
requeue, :func:`plan_exclusions` decides:

* a node resurrect added that has since returned to service (its repair workflow resumed
  it after the exclusion) is removed from the list;
* if the exclusions would leave the job fewer usable nodes in its partition than it needs,
  the oldest nodes resurrect added are removed until it fits, with a note.

Nodes implicated now, and nodes the job's owner or an administrator excluded, are never
removed. A pending job is also given a node back when the node's repair workflow returns it
to service (``OperatorActivities.resume_node``): it may have no requeue coming.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime


@dataclass
class ExclusionPlan:
    exclude: list[str]  # the job's whole exclusion list after the requeue
    dropped: list[str] = field(default_factory=list)  # removed from the list
    notes: list[str] = field(default_factory=list)


def plan_exclusions(
    *,
    job_id: str,
    current: Sequence[str],
    adding: Sequence[str],
    ours: Mapping[str, datetime],
    returned: Mapping[str, datetime],
    usable: Sequence[str],
    needed: int,
) -> ExclusionPlan:
    """The exclusion list for the requeue of ``job_id``.

    ``current``: the job's exclusion list now; ``adding``: nodes implicated now; ``ours``:
    node -> when resurrect added it to this job's list; ``returned``: node -> when its
    repair workflow last returned it to service; ``usable``: the partition's nodes that
    can run jobs now; ``needed``: how many nodes the job needs.
    """
    now_implicated = set(adding)
    exclude = list(dict.fromkeys([*current, *adding]))
    result = ExclusionPlan(exclude=exclude)
    for node in list(exclude):
        added = ours.get(node)
        back = returned.get(node)
        if node in now_implicated or added is None or back is None or back <= added:
            continue
        exclude.remove(node)
        result.dropped.append(node)
        result.notes.append(
            f"{node} no longer excluded from job {job_id}: back in service since"
            f" {back.isoformat(timespec='seconds')}"
        )
    eligible = [n for n in usable if n not in exclude]
    removable = sorted((ours[n], n) for n in exclude if n in ours and n not in now_implicated)
    while len(eligible) < needed and removable:
        added, node = removable.pop(0)
        exclude.remove(node)
        result.dropped.append(node)
        if node in usable:
            eligible.append(node)
        result.notes.append(
            f"{node} no longer excluded from job {job_id} (excluded by resurrect since"
            f" {added.isoformat(timespec='seconds')}): otherwise fewer than its {needed}"
            " nodes could run it"
        )
    return result
