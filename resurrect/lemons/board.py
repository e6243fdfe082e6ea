"""The lemon records as a worker process keeps them for its recoveries: read in O(1).

The record itself lives in each node's repair workflow (:mod:`resurrect.lemons.records`);
reading it all costs a visibility list and a query to every scored node's workflow, up to
a thousand. A recovery must not pay that (a burst of recoveries would pay it once each, and
every query needs a workflow task on a worker busy with the burst). So a
:class:`LemonBoard` per process and cluster keeps the records:

* updated at once by the event that changes them here: the incidents this process's
  recoveries report (:meth:`LemonBoard.note`);
* read again from the repair workflows in the background, one read at a time, once the
  copy is older than :data:`BOARD_MAX_AGE_S` (what other processes recorded, and what the
  repair workflows did with their records: bounds, returns to service). A read lists the
  scored nodes with the score each recorded at its latest incident (one visibility list)
  and queries only the nodes whose recorded score changed or that are new; every
  :data:`FULL_READ_EVERY` reads it queries them all (what changes a record without an
  incident: a return to service). A burst that gave a thousand nodes an incident costs a
  thousand queries once, not at every read while it lasts;
* read by a recovery without waiting (:meth:`LemonBoard.records`); only before the first
  read has ended does a recovery wait, at most ``wait_s``, then go on without the records
  and say so;
* scored as a whole once per read, and node by node as incidents are noted: the board keeps
  which nodes were lemons (or due for draining) when last scored, highest first
  (:attr:`BoardRead.candidates`). A recovery scores those (at most :data:`CANDIDATES`) and
  the nodes it implicates, never every scored node: a burst of recoveries each noting a
  node would otherwise make every recovery score every node the burst noted.

The board's cost is one visibility list, a query per changed node and one scoring of every
node per process per :data:`BOARD_MAX_AGE_S` (a query per scored node every
:data:`FULL_READ_EVERY` of those), whatever the number of recoveries; a recovery's is no read, and a
bounded number of scores.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
import weakref
from collections.abc import Awaitable, Callable, Collection, Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime

from temporalio.client import Client

from resurrect.config import ResurrectConfig
from resurrect.lemons.models import LemonRules, LemonScore, NodeIncident
from resurrect.lemons.records import (
    MAX_NODES_CARRIED,
    lemon_rules,
    list_scored,
    read_records,
    read_states,
    score_records,
)
from resurrect.operator.models import NodeRepairState, RepairTimings
from resurrect.operator.repair_client import repair_timings

log = logging.getLogger(__name__)

# The kept records are read again (in the background) once they are this old.
BOARD_MAX_AGE_S = 60.0
# A full read that takes longer than this is given up (the kept records stay).
READ_TIMEOUT_S = 120.0
# Every this many reads, every scored node is queried; the others query the changed ones.
FULL_READ_EVERY = 10
# The most lemons a recovery scores afresh (highest first as last scored): twice what an
# assessment carries, so that a ranking a little out of date still yields the top ones.
CANDIDATES = 2 * MAX_NODES_CARRIED

Records = dict[str, NodeRepairState]


@dataclass(frozen=True)
class Listing:
    """How a board reads only what changed: the scored nodes with their recorded scores
    (:func:`~resurrect.lemons.records.list_scored`), and the records of some nodes
    (:func:`~resurrect.lemons.records.read_states`)."""

    scored: Callable[[], Awaitable[dict[str, float]]]
    states: Callable[[Collection[str]], Awaitable[Records]]


@dataclass(frozen=True)
class BoardRead:
    """What a recovery gets: the records, and why there are none when they are missing."""

    records: Mapping[str, NodeRepairState]
    note: str = ""
    # The nodes that were lemons or due for draining when last scored, highest score first
    # (at most :data:`CANDIDATES`): with the nodes a recovery implicates, all it scores.
    candidates: tuple[str, ...] = field(default=())


class LemonBoard:
    """One cluster's lemon records as this process knows them (see the module)."""

    def __init__(
        self,
        read: Callable[[], Awaitable[Records]],
        timings: RepairTimings,
        cluster: str,
        *,
        rules: LemonRules | None = None,
        listing: Listing | None = None,
        max_age_s: float = BOARD_MAX_AGE_S,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self._read = read
        self._timings = timings
        self._cluster = cluster
        self._rules = rules or LemonRules()
        self._listing = listing
        self._listed: dict[str, float] = {}  # node -> its recorded score, as last listed
        self._partial_reads = 0  # reads of the changed nodes only since the last full one
        self.max_age_s = max_age_s
        self._clock = clock
        self._records: Records | None = None
        self._read_at = float("-inf")
        self._reading: asyncio.Task[None] | None = None
        self._failure = ""
        # incidents noted since the read under way began (it may not hold them yet)
        self._noted_while_reading: dict[str, list[NodeIncident]] = {}
        self.reads = 0
        # node -> its score, for the nodes a lemon or due for draining when last scored
        self._standing: dict[str, float] = {}
        self._candidates: tuple[str, ...] | None = ()  # None: to be ranked again

    async def records(self, wait_s: float) -> BoardRead:
        """The kept records at once (a read started in the background when they are stale);
        before the first read has ended, waits for it at most ``wait_s``."""
        if self._clock() - self._read_at >= self.max_age_s:
            self.refresh()
        if self._records is None and self._reading is not None:
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(asyncio.shield(self._reading), wait_s)
        if self._records is None:
            why = self._failure or f"first read not done within {wait_s:g} s"
            return BoardRead({}, f"lemon records not read (recovering without them): {why}")
        return BoardRead(self._records, candidates=self.candidates())

    def candidates(self) -> tuple[str, ...]:
        """The nodes that were lemons or due for draining when last scored, highest first
        (at most :data:`CANDIDATES`)."""
        if self._candidates is None:
            ranked = sorted(self._standing.items(), key=lambda item: (-item[1], item[0]))
            self._candidates = tuple(node for node, _ in ranked[:CANDIDATES])
        return self._candidates

    def refresh(self) -> asyncio.Task[None]:
        """Start a full read unless one is under way; the task that reads."""
        if self._reading is None:
            self._noted_while_reading = {}
            self._reading = asyncio.create_task(self._read_and_keep())
        return self._reading

    def note(self, incidents: Mapping[str, NodeIncident]) -> None:
        """Merge incidents just reported (node -> incident) into the kept records."""
        for node, incident in incidents.items():
            if self._reading is not None:
                self._noted_while_reading.setdefault(node, []).append(incident)
            if self._records is not None:
                self._records[node] = self._with(self._records.get(node), node, incident)
                self._score({node: self._records[node]})

    def _score(self, records: Mapping[str, NodeRepairState]) -> None:
        """Score ``records`` now and keep which of them stand as lemons or due."""
        for score in score_records(records, self._rules, datetime.now(UTC)):
            self._stand(score)

    def _stand(self, score: LemonScore) -> None:
        standing = score.lemon or score.drain_due
        if standing and self._standing.get(score.node) != score.score:
            self._standing[score.node] = score.score
            self._candidates = None
        elif not standing and self._standing.pop(score.node, None) is not None:
            self._candidates = None

    def _with(
        self, state: NodeRepairState | None, node: str, incident: NodeIncident
    ) -> NodeRepairState:
        if state is None:
            state = NodeRepairState(cluster=self._cluster, node=node, timings=self._timings)
        if any(i.incident == incident.incident for i in state.incidents):
            return state
        return state.model_copy(update={"incidents": [*state.incidents, incident]})

    async def _read_changed(self) -> Records:
        """The records as the repair workflows hold them: with a listing and kept records,
        the kept ones of nodes whose recorded score is unchanged and a query for the others
        (all of them every ``FULL_READ_EVERY`` reads); otherwise a full read."""
        if self._listing is None:
            return await self._read()
        listed = await self._listing.scored()
        kept = self._records
        if kept is None or self._partial_reads + 1 >= FULL_READ_EVERY:
            fresh = await self._listing.states(listed)
            self._partial_reads = 0
        else:
            changed = [n for n, score in listed.items() if self._listed.get(n) != score]
            fresh = {n: kept[n] for n in listed if n in kept and n not in changed}
            fresh |= await self._listing.states(changed)
            self._partial_reads += 1
        self._listed = listed
        return fresh

    async def _read_and_keep(self) -> None:
        started = self._clock()
        try:
            fresh = await asyncio.wait_for(self._read_changed(), READ_TIMEOUT_S)
        except Exception as exc:  # the kept records stay; the next recovery asks again
            self._failure = f"{exc.__class__.__name__}: {str(exc)[:200]}"
            log.warning("lemon records not read (recovering without them): %s", self._failure)
            self._read_at = started - self.max_age_s / 2  # try again sooner than a full age
            return
        finally:
            self._reading = None
        self.reads += 1
        self._failure = ""
        for node, noted in self._noted_while_reading.items():
            for incident in noted:
                fresh[node] = self._with(fresh.get(node), node, incident)
        self._noted_while_reading = {}
        self._records, self._read_at = fresh, started
        self._standing, self._candidates = {}, None
        self._score(fresh)


_BOARDS: weakref.WeakKeyDictionary[Client, dict[str, LemonBoard]] = weakref.WeakKeyDictionary()


def board_for(client: Client, config: ResurrectConfig) -> LemonBoard:
    """This process's board of ``config``'s cluster (one per client and cluster)."""
    boards = _BOARDS.setdefault(client, {})
    cluster = config.cluster.name
    if cluster not in boards:
        boards[cluster] = LemonBoard(
            lambda: read_records(client, config),
            repair_timings(config),
            cluster,
            rules=lemon_rules(config),
            listing=Listing(
                scored=lambda: list_scored(client, config),
                states=lambda names: read_states(client, config, names),
            ),
        )
    return boards[cluster]
