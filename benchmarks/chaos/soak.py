"""The chaos soak on the live local cluster: resurrect as in production, a steady mix of
jobs, the seeded schedule of faults, samples all along, the invariants and figures at the end.

:class:`Soak` starts (with the project's own code) a Slurm cluster of ``nodes`` nodes
(``start_local_slurm``), the Temporal dev server on its database file, and resurrect's parts
as separate processes it can SIGKILL and restart: ``resurrect worker``, ``resurrect watch``
(Slurm watcher, log follower, liveness collector), ``resurrect watchdog`` and one node agent
a node (``agent_host.py``: ``resurrect agent run`` over simulated GPUs), the agents'
heartbeats passing a UDP relay (``relay.py``) the liveness fault drops. resurrect's state
directory is a small tmpfs the disk-full fault fills. It keeps one job of each
:data:`~.jobs.SHAPES` running (a new one when one ends) until the last injection has fired
(a job submitted after it would meet no fault), then, once the soak's minutes are over,
waits for every job to end and every recovery to close, reads the recoveries and each
job's goodput, and checks the invariants on the :class:`History`.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import platform
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import yaml
from temporalio.client import Client, WorkflowExecutionStatus
from temporalio.service import RPCError

from resurrect.config import IsolationSettings, ResurrectConfig
from resurrect.contracts import JobInfo, JobState, RecoveryOutcome
from resurrect.contracts.workflow_ids import recovery_workflow_id
from resurrect.demo.host_namespaces import (
    CONTROLLER,
    WORKER,
    Host,
    enter_network,
    host_of_process,
    hosts_up,
)
from resurrect.demo.local_cluster import (
    DEPLOY_DIR,
    LocalSlurm,
    rendezvous_port_base,
    start_local_slurm,
    stop_local_slurm,
)
from resurrect.demo.scenarios.straggler import STRAGGLER_POLICY
from resurrect.errors import ResurrectError
from resurrect.goodput.history import load_recoveries
from resurrect.goodput.report import job_goodput
from resurrect.operator.budget import limits_for
from resurrect.operator.repair_client import node_state
from resurrect.scheduler.base import DRAIN_REASON_PREFIX
from resurrect.sensors.liveness.wire import load_key, node_key
from resurrect.stacks.processes import process_state, scan_rank_processes
from resurrect.temporal.client import connect
from resurrect.temporal.server import EmbeddedTemporal, free_port

from .faults import NOT_INJECTED, FaultKind, kinds_for
from .figures import figures
from .history import (
    FaultRecord,
    History,
    JobGoodputRecord,
    JobRun,
    JobSample,
    Recovery,
    Sample,
)
from .inject import INJECTORS, Skip, crash_with_traceback
from .inject_hosts import HOST_INJECTORS, RETURN_WAIT_S
from .invariants import check_all
from .jobs import SHAPES, JobShape, Submitted, fault_free_sha, submit
from .leftovers import read_leftover_cancellations
from .processes import Supervised
from .relay import LivenessRelay
from .schedule import Injection, build_schedule

REPO_ROOT = Path(__file__).resolve().parents[2]
# Slurm states in which a job is not (or no longer) running or waiting to run.
TERMINAL = frozenset(
    {JobState.COMPLETED, JobState.FAILED, JobState.CANCELLED, JobState.TIMEOUT,
     JobState.NODE_FAIL, JobState.OUT_OF_MEMORY, JobState.BOOT_FAIL, JobState.DEADLINE,
     JobState.PREEMPTED}
)  # fmt: skip
ISOLATION: dict[str, Any] = {"max_drain_fraction": 0.5, "max_drain_nodes": 2, "window_s": 300.0}
STATE_FS_SIZE = "64m"

Say = Callable[[str], None]


@dataclass
class SoakSettings:
    minutes: float
    seed: int
    nodes: int = 6
    slurm_version: str | None = None
    state_dir: Path | None = None  # default: a fresh /tmp/resurrect-chaos-*
    # "local": every node on this host's network; "netns": each node its own host
    # (deploy/local-slurm/hosts.sh), with the faults of HOST_KINDS and fencing on
    hosts: str = "local"
    kinds: list[FaultKind] | None = None  # None: kinds_for(hosts)
    shapes: tuple[JobShape, ...] = SHAPES
    mean_gap_s: float = 20.0
    warmup_s: float = 45.0  # no faults yet; RSS is compared from this long after a start
    settle_s: float = 30.0  # no faults in the soak's last seconds
    end_timeout_s: float = 900.0  # at most this long for jobs to end and recoveries to close
    repair_wait_s: float = 90.0  # a faulted node is repaired once drained, or after this
    repair_delay_s: float = 10.0  # the operator's repair after the drain
    sample_s: float = 2.0
    python: str = field(default_factory=lambda: sys.executable)


class Soak:
    """One soak run; ``await run()`` returns the result (JSON-ready)."""

    def __init__(self, settings: SoakSettings, say: Say) -> None:
        self.settings = settings
        self.say = say
        self.root = Path(settings.state_dir or _fresh_dir(f"resurrect-chaos-{settings.seed}-"))
        self.state_dir = self.root / "resurrect-state"  # a tmpfs, for the disk-full fault
        self.cluster: LocalSlurm = None  # type: ignore[assignment]  # set by run()
        self.server: EmbeddedTemporal | None = None
        self.temporal_port = free_port()
        self.client: Client = None  # type: ignore[assignment]
        self.config: ResurrectConfig = None  # type: ignore[assignment]
        self.label = f"chaos{settings.seed}"
        self.relay: LivenessRelay = None  # type: ignore[assignment]
        self.parts: dict[str, Supervised] = {}
        self.agents: dict[str, Supervised] = {}
        self.submitted: dict[str, Submitted] = {}
        self.job_info: dict[str, JobInfo] = {}
        self.references: dict[str, str] = {}
        # nodes under an injected fault until repaired, with the fault
        self.faulted_nodes: dict[str, FaultRecord] = {}
        self.agent_down: set[str] = set()
        self.stopped_pids: set[int] = set()
        self.never_healed: set[str] = set()  # partitions left until the soak ends
        self.frozen_hosts: set[str] = set()
        self.address = "127.0.0.1"  # where the nodes reach the controller
        self._hosts: dict[str, Host] = {}  # hosts in namespaces, by name
        self.relay_port = 0
        self.history = History(
            seed=settings.seed, started_at=0.0, ended_at=0.0, drain_limit=0,
            warmup_s=max(settings.warmup_s, settings.minutes * 60 / 3),
        )  # fmt: skip
        self._background: set[asyncio.Task[None]] = set()
        self._mounted = False
        self.commit = _commit()  # the code the soak's processes start from

    # ------------------------------------------------------------------ the run
    async def run(self) -> dict[str, Any]:
        s = self.settings
        try:
            if s.hosts == "netns":
                self._enter_hosts()
            await self._start()
            schedule = build_schedule(
                s.seed, s.minutes * 60, warmup_s=s.warmup_s, settle_s=s.settle_s,
                mean_gap_s=s.mean_gap_s, kinds=self.kinds,
            )  # fmt: skip
            self.say(f"schedule: {len(schedule)} injections over {s.minutes} min (seed {s.seed})")
            t0 = time.time()
            self.history.started_at = t0
            done_submitting = asyncio.Event()
            sampler = asyncio.create_task(self._sample_forever())
            keeper = asyncio.create_task(self._keep_slots(done_submitting))
            injections = await self._inject(schedule, t0)
            if schedule:  # a job submitted after the last injection meets no fault: it
                done_submitting.set()  # would only make the end wait longer
            await asyncio.sleep(max(0.0, t0 + s.minutes * 60 - time.time()))
            done_submitting.set()
            await keeper
            self.say("injections over: waiting for faults to be undone and jobs to end")
            await asyncio.gather(*injections, return_exceptions=True)
            await self._settle()
            sampler.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await sampler
            await self._sample_once()
            self.history.ended_at = time.time()
            await self._collect()
            return self._result(schedule)
        finally:
            await self._stop()

    @property
    def kinds(self) -> list[FaultKind]:
        s = self.settings
        return s.kinds if s.kinds is not None else kinds_for(s.hosts)

    # ------------------------------------------------------------------ start and stop
    def _enter_hosts(self) -> None:
        """Make the hosts in namespaces and move this process onto the controller's network
        (before any thread starts: they and every process started later are there too)."""
        self.root.mkdir(parents=True, exist_ok=True)
        self.root.chmod(0o755)
        hosts = hosts_up(self.root / "slurm", self.settings.nodes)
        enter_network(hosts[CONTROLLER])
        self.address = hosts[CONTROLLER].address
        self.say(f"on hosts in namespaces: controller {self.address}, nodes {len(hosts) - 2}")

    async def _start(self) -> None:
        s = self.settings
        self.root.mkdir(parents=True, exist_ok=True)
        self.root.chmod(0o755)
        self.say(f"starting a {s.nodes}-node Slurm cluster in {self.root}")
        shapes = [shape for shape in s.shapes if shape.opted_in]
        cluster_start = asyncio.create_task(asyncio.to_thread(
            start_local_slurm, nodes=s.nodes, cluster_name=self.label,
            state_dir=self.root / "slurm", slurm_version=s.slurm_version, hosts=s.hosts,
            prolog=str(DEPLOY_DIR / "prolog-fail-marked.sh"),
        ))  # fmt: skip
        references = asyncio.gather(
            *(asyncio.to_thread(fault_free_sha, s.python, shape, self.root) for shape in shapes)
        )
        self.cluster = await cluster_start
        shas = await references
        self.references = {shape.name: sha for shape, sha in zip(shapes, shas, strict=True)}
        self.say(f"cluster up: {', '.join(self.cluster.nodes)}; fault-free runs: {self.references}")
        self._mount_state_dir()
        self.start_temporal()
        key_file = self.root / "liveness.key"
        key_file.write_text(os.urandom(32).hex())
        key_file.chmod(0o600)
        collector_port = _free_udp_port(self.address)
        self.relay = LivenessRelay((self.address, collector_port))
        relay_port = self.relay_port = await self.relay.start(host=self.address)
        self.config = self._config(collector_port, key_file)
        config_path = self.root / "resurrect.yaml"
        config_path.write_text(yaml.safe_dump(self.config.model_dump(mode="json")))
        self.client = await connect(self.config.temporal, attempts=20)
        limits = limits_for(
            IsolationSettings.model_validate(ISOLATION), len(self.cluster.nodes), {}
        )
        self.history.drain_limit = limits.cluster
        env = {**os.environ, "PYTHONPATH": str(REPO_ROOT), "RESURRECT_CONFIG": str(config_path)}
        logs = self.root / "logs"
        logs.mkdir(exist_ok=True)
        cli = [s.python, "-c", "import sys; from resurrect.cli import main; sys.exit(main())"]
        for part, args, host in (
            ("worker", ["worker"], WORKER),  # its own host: the worker <-> Temporal link
            ("watcher", ["watch"], CONTROLLER),
            ("watchdog", ["watchdog"], CONTROLLER),
        ):
            argv = self.cluster.on_host(host, [*cli, *args])
            self.parts[part] = Supervised(part, argv, env, logs / f"{part}.log")
        master = load_key(key_file)
        for node in self.cluster.nodes:
            node_key_file = self.root / f"liveness-{node}.key"
            node_key_file.write_bytes(node_key(master, self.label, node))
            node_key_file.chmod(0o600)
            agent_env = {
                **env,
                "RESURRECT_AGENT__COLLECTOR": f"{self.address}:{relay_port}",
                "RESURRECT_AGENT__COLLECTOR_KEY_FILE": str(node_key_file),
            }
            argv = self.cluster.on_host(node, [
                s.python, str(Path(__file__).with_name("agent_host.py")),
                "--config", str(config_path), "--node", node])  # fmt: skip
            agent = Supervised(f"agent-{node}", argv, agent_env, logs / f"agent-{node}.log")
            self.agents[node] = self.parts[agent.part] = agent
        for supervised in self.parts.values():
            supervised.start()
        self.say("resurrect running: " + ", ".join(self.parts))

    def _config(self, collector_port: int, key_file: Path) -> ResurrectConfig:
        assert self.server is not None
        on_hosts: dict[str, Any] = {}
        if self.settings.hosts == "netns":
            # the cut-off nodes fence themselves; a healed node returns to service through
            # the repair workflow's health check alone (the soak never resumes it)
            on_hosts = {
                "fencing": {"enabled": True},
                "repair": {"cool_down_s": 5, "recheck_interval_s": 10, "max_checks": 50,
                           "probation_s": 0},
            }  # fmt: skip
        return ResurrectConfig.model_validate(
            {
                "mode": "act",
                "cluster": {
                    "name": self.label, "slurm_conf": self.cluster.slurm_conf,
                    "slurm_bin_dir": str(self.cluster.bin_dir), "scheduler": "cli",
                },
                "temporal": {
                    "embedded": False, "address": f"{self.address}:{self.temporal_port}",
                    "state_dir": str(self.state_dir),
                    # a private bridge only the cluster's namespaces are on
                    **({"allow_plaintext": True} if on_hosts else {}),
                },
                "watcher": {"poll_interval_s": 1.0, "log_poll_interval_s": 0.1,
                            "kick_hooks": False},
                "recovery": {"wait_running_timeout_s": 300},
                "isolation": {**ISOLATION,
                              "health_check_argv": self.cluster.health_check_argv},
                "policy": {"default": {"enabled": False, "progress": STRAGGLER_POLICY}},
                "liveness": {"collector": True, "host": self.address, "port": collector_port,
                             "key_file": str(key_file)},
                "agent": {"kernel_log": False, "interval_s": 1.0, **self._liveness_pace},
                "watchdog": {"hold_bound_s": 60, "interval_s": 5},
                **on_hosts,
            }
        )  # fmt: skip

    @property
    def _liveness_pace(self) -> dict[str, float]:
        """On hosts in namespaces a lost host is found out by its agent's silence: beats every
        second, silent after 3 s (the collector's floor), well inside the 20 s fencing lease."""
        if self.settings.hosts != "netns":
            return {}
        return {"heartbeat_interval_s": 1.0, "silence_threshold_s": 3.0}

    def _mount_state_dir(self) -> None:
        self.state_dir.mkdir(parents=True, exist_ok=True)
        subprocess.run(
            ["mount", "-t", "tmpfs", "-o", f"size={STATE_FS_SIZE},mode=0700", "tmpfs",
             str(self.state_dir)], check=True, timeout=30,
        )  # fmt: skip
        self._mounted = True

    def start_temporal(self) -> None:
        # on hosts in namespaces every address of the controller's host: the dev server's
        # frontend reaches its own services on 127.0.0.1, the nodes reach it on the bridge
        host = "0.0.0.0" if self.settings.hosts == "netns" else "127.0.0.1"
        self.server = EmbeddedTemporal(
            state_dir=self.root / "temporal", host=host, port=self.temporal_port, ui_port=None
        )
        self.server.start()

    def kill_temporal(self) -> None:
        server = self.server
        if server is not None and server.process is not None:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(server.process.pid, signal.SIGKILL)
            server.process.wait(timeout=30)

    async def _stop(self) -> None:
        for task in self._background:
            task.cancel()
        for pid in self.stopped_pids:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGCONT)
        if self.cluster is not None and self.cluster.hosts == "netns":
            for node in self.frozen_hosts:
                with contextlib.suppress(RuntimeError):
                    await asyncio.to_thread(self.cluster.thaw_host, node)
            with contextlib.suppress(RuntimeError):
                await asyncio.to_thread(self.cluster.heal, "all")
        for part in self.parts.values():
            with contextlib.suppress(Exception):
                part.stop()
        if self.relay is not None:
            self.relay.close()
        if self.server is not None:
            await asyncio.to_thread(self.server.stop)
        if self.cluster is not None:
            await asyncio.to_thread(stop_local_slurm, self.cluster, purge=False)
        if self._mounted:
            subprocess.run(["umount", "-l", str(self.state_dir)], check=False, timeout=30)

    # ------------------------------------------------------------------ jobs
    async def _keep_slots(self, done: asyncio.Event) -> None:
        """One job of each shape running or waiting, until ``done``."""
        port_base = rendezvous_port_base(self.settings.seed)
        live: dict[str, str] = {}
        while not done.is_set():
            for shape in self.settings.shapes:
                current = live.get(shape.name)
                if current is None or await self._done(current):
                    try:
                        job = await asyncio.to_thread(
                            submit, self.cluster, shape, self.settings.python, port_base
                        )
                    except RuntimeError as exc:  # slurmctld restarting: next round
                        self.say(f"submit {shape.name} failed: {exc}")
                        continue
                    self.submitted[job.job_id] = job
                    live[shape.name] = job.job_id
                    self.history.jobs.append(
                        JobRun(
                            job.job_id,
                            shape.name,
                            shape.opted_in,
                            shape.max_restarts,
                            job.submitted_at,
                        )
                    )
                    self.say(f"submitted {shape.name} job {job.job_id}")
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(done.wait(), timeout=self.settings.sample_s)

    async def _done(self, job_id: str) -> bool:
        """Whether the job is over for good: completed, ended without opting in, or stopped
        by a closed recovery of its last attempt (a failed opted-in job may be requeued)."""
        info = self.job_info.get(job_id)
        if info is None or info.state not in TERMINAL:
            return False
        if info.state is JobState.COMPLETED or not self.submitted[job_id].shape.opted_in:
            return True
        wid = recovery_workflow_id(self.label, job_id, info.restart_count)
        try:
            described = await self.client.get_workflow_handle(wid).describe()
        except RPCError:
            return False
        return described.status not in (None, WorkflowExecutionStatus.RUNNING)

    async def jobs_recovering(self, *, ended_too: bool = False) -> list[str]:
        """Opted-in jobs with a recovery workflow still running; with ``ended_too``, jobs
        that have ended too (a recovery may close after its job did: the soak's end waits
        for it)."""
        found = []
        for jid, info in list(self.job_info.items()):
            if not self.submitted[jid].shape.opted_in or (info.state in TERMINAL and not ended_too):
                continue
            for attempt in {max(0, info.restart_count - 1), info.restart_count}:
                wid = recovery_workflow_id(self.label, jid, attempt)
                with contextlib.suppress(RPCError):
                    described = await self.client.get_workflow_handle(wid).describe()
                    if described.status is WorkflowExecutionStatus.RUNNING:
                        found.append(jid)
                        break
        return found

    def recurring_app_fault(self, job_id: str, restart_count: int) -> None:
        """The application bug recurs in every later attempt of the job."""
        self._spawn(self._recur(job_id, restart_count))

    async def _recur(self, job_id: str, last: int) -> None:
        while True:
            info = self.job_info.get(job_id)
            if info is not None and info.state is JobState.RUNNING and info.restart_count > last:
                with contextlib.suppress(Skip):
                    await crash_with_traceback(self, info)
                    last = info.restart_count
                    self.say(f"the application bug recurs in job {job_id} (attempt {last})")
            elif info is not None and info.state in TERMINAL and self._injecting_over:
                return
            await asyncio.sleep(1.0)

    @property
    def _injecting_over(self) -> bool:
        return time.time() > self.history.started_at + self.settings.minutes * 60

    # ------------------------------------------------------------------ faults
    async def _inject(self, schedule: list[Injection], t0: float) -> list[asyncio.Task[None]]:
        """Start every injection at its offset (each in its own task: they overlap)."""
        tasks = []
        for injection in schedule:
            await asyncio.sleep(max(0.0, t0 + injection.offset_s - time.time()))
            tasks.append(asyncio.create_task(self._fire(injection)))
        return tasks

    async def _fire(self, injection: Injection) -> None:
        record = FaultRecord(injection.index, injection.kind, time.time())
        self.history.faults.append(record)
        try:
            await {**INJECTORS, **HOST_INJECTORS}[injection.kind](self, injection, record)
        except Skip as skip:
            record.skipped = str(skip)
        except Exception as exc:
            record.skipped = f"injection failed: {type(exc).__name__}: {exc}"
        hit = [f"job {record.job_id}" if record.job_id else "", record.node or "", record.detail]
        shown = f"skipped ({record.skipped})" if record.skipped else " ".join(p for p in hit if p)
        offset = record.at - self.history.started_at
        self.say(f"FAULT #{injection.index} {injection.kind} at +{offset:.0f} s: {shown}")

    def repair_later(self, node: str, record: FaultRecord) -> None:
        self._spawn(self._repair(node, record))

    async def drained_or_timeout(self, node: str) -> None:
        """Return once resurrect drained ``node``, or after ``repair_wait_s``."""
        deadline = time.monotonic() + self.settings.repair_wait_s
        scheduler = self.cluster.scheduler()
        while time.monotonic() < deadline:
            with contextlib.suppress(ResurrectError):
                found = await scheduler.get_node(node)
                if found.drained and found.reason.startswith(DRAIN_REASON_PREFIX):
                    return
            await asyncio.sleep(1.0)

    async def _repair(self, node: str, record: FaultRecord) -> None:
        """The operator: once resurrect drained the node (or after a while), bring it back."""
        await self.drained_or_timeout(node)
        await asyncio.sleep(self.settings.repair_delay_s)
        await asyncio.to_thread(self.cluster.start_node, node)
        if node not in self.agent_down:
            self.agents[node].start()
        await asyncio.to_thread(
            self.cluster.run,
            ["scontrol", "update", f"NodeName={node}", "State=RESUME"],
            check=False,
        )
        self.faulted_nodes.pop(node, None)
        record.ended_at = time.time()
        self.say(f"repaired {node}")

    def watch_return(self, node: str, record: FaultRecord) -> None:
        """A healed (or rebooted) node is the faulted one until back in service: resurrect's
        repair workflow returns it (the soak never resumes it), or a bounded wait ends."""
        self._spawn(self._watch_return(node, record))

    async def _watch_return(self, node: str, record: FaultRecord) -> None:
        deadline = time.monotonic() + RETURN_WAIT_S
        scheduler = self.cluster.scheduler()
        while time.monotonic() < deadline:
            with contextlib.suppress(ResurrectError):
                found = await scheduler.get_node(node)
                responding = "NOT_RESPONDING" not in found.flags
                if (
                    not found.drained
                    and responding
                    and found.state in ("IDLE", "ALLOCATED", "MIXED")
                ):
                    break
            await asyncio.sleep(1.0)
        if self.faulted_nodes.get(node) is record:
            self.faulted_nodes.pop(node, None)

    def _spawn(self, coro: Any) -> None:
        task = asyncio.create_task(coro)
        self._background.add(task)
        task.add_done_callback(self._background.discard)

    # ------------------------------------------------------------------ samples
    async def _sample_forever(self) -> None:
        while True:
            await self._sample_once()
            await asyncio.sleep(self.settings.sample_s)

    async def _sample_once(self) -> None:
        scheduler = self.cluster.scheduler()
        try:
            _, nodes = await scheduler.drain_census()
        except ResurrectError as exc:
            # slurmctld not answering (restarting): no sample, since a census not read is
            # not "nothing drained" (it would end every drain there and start a new one)
            self.say(f"no sample: the drain census failed: {exc}")
            return
        drained = {n.name: n.reason for n in nodes if n.reason.startswith(DRAIN_REASON_PREFIX)}
        # stamped once the drains are read: a drain seen is no later than the sample's time
        sample = Sample(at=time.time(), drained=drained)
        for jid in list(self.submitted):
            try:
                info = await scheduler.get_job(jid)
            except ResurrectError:
                continue
            self.job_info[jid] = info
            sample.jobs[jid] = JobSample(info.state.value, info.restart_count, info.held)
            for node in set(info.nodes).intersection(self.faulted_nodes):
                hit = self.faulted_nodes[node].affected_jobs  # it landed on the faulted node
                if jid not in hit and info.state is not JobState.PENDING:
                    hit.append(jid)
        sample.old_ranks, sample.faulted_node_ranks = await asyncio.to_thread(self._rank_census)
        self.history.samples.append(sample)
        for part in self.parts.values():
            part.look()

    def _rank_census(
        self,
    ) -> tuple[dict[str, list[tuple[int, int, str]]], dict[str, list[tuple[str, int, int, str]]]]:
        """One pass over /proc (the kernel's word on which job and attempt a process is in):
        the live ranks of attempts older than their job's current one, by job; and the live
        ranks on each node under a fault, by node."""
        old: dict[str, list[tuple[int, int, str]]] = {}
        on_faulted: dict[str, list[tuple[str, int, int, str]]] = {}
        if not self.job_info:
            return old, on_faulted
        for rank in scan_rank_processes():
            info = self.job_info.get(rank.job_id)
            if rank.slurm_conf != self.cluster.slurm_conf or info is None:
                continue  # another cluster's job (every local cluster numbers from 1)
            attempt = int(rank.restart_count) if rank.restart_count.isdigit() else 0
            state = process_state(rank.process.pid)
            if state in ("", "Z", "X"):
                continue
            if attempt < info.restart_count:
                old.setdefault(rank.job_id, []).append((attempt, rank.process.pid, state))
            node = rank.step_node or self._node_of_network(rank.process.pid)
            if node is not None and node in self.faulted_nodes:
                on_faulted.setdefault(node, []).append(
                    (rank.job_id, attempt, rank.process.pid, state)
                )
        return old, on_faulted

    def _node_of_network(self, pid: int) -> str | None:
        """The node whose host's network namespace ``pid`` is in (hosts in namespaces)."""
        if not self._hosts:
            self._hosts = self.cluster.host_map
        return host_of_process(self._hosts, pid)

    async def _settle(self) -> None:
        """Wait (bounded) for repairs, for every job to end and every recovery to close."""
        deadline = time.monotonic() + self.settings.end_timeout_s
        while time.monotonic() < deadline:
            ended = all(
                (info := self.job_info.get(jid)) is not None and info.state in TERMINAL
                for jid in self.submitted
            )
            if ended and not self._background and not await self.jobs_recovering(ended_too=True):
                return
            await asyncio.sleep(self.settings.sample_s)
        self.say("stopped waiting: some jobs or recoveries had not ended")

    # ------------------------------------------------------------------ the end
    async def _collect(self) -> None:
        records = await load_recoveries(self.client, cluster=self.label)
        for r in records:
            notes = [r.summary] if r.summary else []
            if r.closed_at is not None:
                handle = self.client.get_workflow_handle(r.workflow_id, result_type=RecoveryOutcome)
                with contextlib.suppress(Exception):
                    outcome = await asyncio.wait_for(handle.result(), timeout=30)
                    notes = [f"action {outcome.action.value}", *outcome.notes]
            self.history.recoveries.append(
                Recovery(
                    workflow_id=r.workflow_id,
                    job_id=r.job_id,
                    started_at=r.started_at.timestamp(),
                    closed_at=r.closed_at.timestamp() if r.closed_at else None,
                    status="closed" if r.closed_at else "running",
                    outcome=r.outcome,
                    fault_class=r.fault_class,
                    requeued=r.requeued_at is not None,
                    drained_nodes=list(r.drained_nodes),
                    running_again_at=r.running_again_at.timestamp() if r.running_again_at else None,
                    notes=notes,
                )
            )
        now = datetime.now(UTC)
        for run in self.history.jobs:
            info = self.job_info.get(run.job_id)
            if info is not None:
                run.restart_count = info.restart_count
                run.final_state = info.state.value if info.state in TERMINAL else None
                run.ended_at = time.time() if info.state in TERMINAL else None
            job = self.submitted[run.job_id]
            run.leftover_cancellations = read_leftover_cancellations(job.output)
            if job.ckpt_dir is not None:
                run.reference_sha = self.references.get(run.shape)
                sha = job.ckpt_dir / "final.sha256"
                run.final_sha = sha.read_text().strip() if sha.is_file() else None
            if info is None or not run.opted_in:
                continue
            mine = [r for r in records if r.job_id == run.job_id]
            cost = await job_goodput(None, self.label, run.job_id, mine, now, job=info)
            self.history.goodput.append(
                JobGoodputRecord(
                    run.job_id, cost.wall_s, {k: p.seconds for k, p in cost.parts.items()}
                )
            )
        for part in self.parts.values():
            self.history.processes.extend(part.lives)
        for jid, job in self.submitted.items():
            if job.ckpt_dir is not None:
                self.history.checkpoint_files[jid] = _checkpoint_files(job.ckpt_dir)
        for node in self.cluster.nodes:
            with contextlib.suppress(Exception):
                state = await node_state(self.client, self.label, node)
                if state is not None:
                    self.history.returned_by_repair[node] = [
                        e.at.timestamp() for e in state.events if e.kind == "returned"
                    ]

    def _result(self, schedule: list[Injection]) -> dict[str, Any]:
        s = self.settings
        verdicts = check_all(self.history)
        (self.root / "history.json").write_text(json.dumps(self.history.to_json(), default=str))
        return {
            "benchmark": "chaos_soak",
            "seed": s.seed,
            "commit": self.commit,
            "minutes": s.minutes,
            "wall_s": round(self.history.ended_at - self.history.started_at, 1),
            "machine": f"{platform.node()} {os.cpu_count()} cpus {platform.platform()}",
            "slurm_version": self.cluster.slurm_version,
            "nodes": s.nodes,
            "jobs": len(self.history.jobs),
            "scheduled": len(schedule),
            "hosts": s.hosts,
            "kinds": [k.name for k in self.kinds],
            "kinds_not_injected": NOT_INJECTED,
            "unexpected_exits": {p.part: p.unexpected_exits for p in self.parts.values()
                                 if p.unexpected_exits},
            "invariants": [v.as_line() for v in verdicts],
            "violations": sum(len(v.violations) for v in verdicts),
            **figures(self.history),
            "history": str(self.root / "history.json"),
        }  # fmt: skip


def _checkpoint_files(ckpt_dir: Path) -> list[tuple[str, float]]:
    """Every file of the job's checkpoints (``step_*``) with its mtime."""
    found = []
    for step in sorted(ckpt_dir.glob("step_*")):
        with contextlib.suppress(OSError):
            for item in step.iterdir():
                with contextlib.suppress(OSError):
                    found.append((str(item), item.stat().st_mtime))
    return found


def _fresh_dir(prefix: str) -> Path:
    import tempfile

    return Path(tempfile.mkdtemp(prefix=prefix, dir="/tmp"))


def _free_udp_port(host: str = "127.0.0.1") -> int:
    import socket

    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as probe:
        probe.bind((host, 0))
        return int(probe.getsockname()[1])


def _commit() -> str:
    head = subprocess.run(
        ["git", "-C", str(REPO_ROOT), "rev-parse", "--short", "HEAD"],
        capture_output=True, text=True, check=False,
    ).stdout.strip()  # fmt: skip
    dirty = subprocess.run(
        ["git", "-C", str(REPO_ROOT), "status", "--porcelain", "--untracked-files=no"],
        capture_output=True, text=True, check=False,
    ).stdout.strip()  # fmt: skip
    return f"{head}{'+dirty' if dirty else ''}" or "unknown"


async def run_soak(settings: SoakSettings, say: Say) -> dict[str, Any]:
    return await Soak(settings, say).run()
