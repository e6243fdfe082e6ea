"""The demo: a real local Slurm cluster, resurrect, a real training job, a fault, what
resurrect does about it.

``Demo.run`` starts everything on this machine (a Slurm cluster from ``deploy/local-slurm``,
the embedded Temporal server with its web UI, the worker, the Slurm watcher and the job-log
follower, and node agents with simulated GPUs when the scenario needs them), submits the
example ``torchrun`` job on 2 nodes as an unprivileged user with an opt-in comment, waits
until it has written the checkpoint the scenario wants, and lets the scenario
(:mod:`resurrect.demo.scenarios`) inject its fault, follow the recovery and verify it. Most
scenarios measure:

* ``time_to_detect_s``: fault injected -> recovery workflow started;
* ``time_to_recover_s``: recovery workflow started -> job running again (on healthy nodes);

and it stops everything it started (:meth:`Demo.close`).
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import shutil
import subprocess
import time
from collections.abc import Coroutine
from pathlib import Path
from typing import TYPE_CHECKING, Any

from temporalio.client import Client

from resurrect.config import ResurrectConfig
from resurrect.contracts import JobState
from resurrect.demo.host_namespaces import CONTROLLER, enter_network, hosts_up
from resurrect.demo.local_cluster import (
    LocalSlurm,
    rendezvous_port_base,
    repo_root,
    start_local_slurm,
    stop_local_slurm,
)
from resurrect.demo.scenarios import SCENARIOS, Scenario, scenario_named
from resurrect.demo.stage import (
    DemoError,
    DemoSettings,
    Progress,
    Stage,
    checkpoint_steps,
)
from resurrect.service import ServiceParts, run_service
from resurrect.temporal.client import connect
from resurrect.temporal.server import EmbeddedTemporal, free_port, port_open

if TYPE_CHECKING:
    from resurrect.sensors.node_agent import FakeNvml

__all__ = ["SCENARIOS", "Demo", "DemoError", "DemoSettings", "Scenario", "checkpoint_steps"]

JOB_NODES = 2
CHECKPOINT_WAIT_S = 180.0


class Demo:
    """One demo run; ``await run()`` returns the result dict (also printed as JSON)."""

    def __init__(self, settings: DemoSettings, progress: Progress) -> None:
        self.settings = settings
        self.scenario: Scenario = scenario_named(settings.scenario)
        self.say = progress
        self.cluster: LocalSlurm | None = None
        self.server: EmbeddedTemporal | None = None
        self.agent_processes: list[subprocess.Popen[bytes]] = []
        self._collector_port = 0

    def succeeded(self, result: dict[str, Any]) -> bool:
        """Whether ``result`` shows what the scenario expects of resurrect."""
        return self.scenario.succeeded(result)

    def _config(self, cluster: LocalSlurm, address: str) -> ResurrectConfig:
        rest: dict[str, Any] = {}
        on_hosts: dict[str, Any] = {}
        if cluster.hosts == "netns":
            # the nodes' agents heartbeat the liveness collector on the controller's host; a
            # cut-off node fences itself; its repair is the health check's (check-node.sh)
            on_hosts = {
                "liveness": {"collector": True, "host": cluster.controller_address,
                             "port": self._collector_port,
                             "key_file": str(self.settings.state_dir / "liveness.key")},
                "fencing": {"enabled": True},
                # a lost host is found out by its agent's silence: beats every second, silent
                # after 3 s (the collector's floor), well inside the 20 s fencing lease
                "agent": {"heartbeat_interval_s": 1.0, "silence_threshold_s": 3.0},
                "isolation": {"health_check_argv": cluster.health_check_argv},
                "repair": {"cool_down_s": 5, "recheck_interval_s": 10, "max_checks": 50},
            }  # fmt: skip
        if self.settings.scheduler == "slurmrestd":
            rest = {
                "slurmrestd_url": f"unix:{cluster.restd['RESTD_SOCKET']}",
                "slurmrestd_token_file": cluster.restd["RESTD_TOKEN_FILE"],
            }
        return ResurrectConfig.model_validate(
            {
                "mode": "act",
                "cluster": {
                    "name": cluster.cluster_name,
                    "slurm_conf": cluster.slurm_conf,
                    # the cluster's own version's clients (RESURRECT_SLURM_VERSION)
                    "slurm_bin_dir": str(cluster.bin_dir),
                    "scheduler": self.settings.scheduler,
                    **rest,
                },
                "temporal": {
                    "embedded": False,
                    "address": address,
                    "state_dir": str(self.settings.state_dir / "resurrect"),
                    # hosts in namespaces: a private bridge only the cluster's hosts are on
                    **({"allow_plaintext": True} if on_hosts else {}),
                },
                "watcher": {"poll_interval_s": 1.0, "log_poll_interval_s": 0.1},
                "recovery": {"wait_running_timeout_s": 300},
                # the operator's policy (a job's comment may only make it more conservative)
                "policy": {
                    "default": {
                        "enabled": False,
                        **self.scenario.operator_policy(self.settings),
                    }
                },
                **on_hosts,
            }
        )

    async def run(self) -> dict[str, Any]:
        """Start everything, submit the job, play the scenario; its result."""
        s = self.settings
        root = repo_root()
        s.state_dir.mkdir(parents=True, exist_ok=True)
        # Job ids restart at 1 with every fresh demo cluster: recoveries of an earlier demo
        # in a kept Temporal database would share workflow ids with this one's.
        shutil.rmtree(s.state_dir / "temporal", ignore_errors=True)
        nodes = self.scenario.cluster_nodes(s)
        hosts = self.scenario.hosts
        if hosts == "netns":
            # before any thread starts: what this process starts later is on that network too
            made = hosts_up(s.state_dir / "slurm", nodes)
            enter_network(made[CONTROLLER])
            self.say(f"hosts in namespaces: controller {made[CONTROLLER].address}, {nodes} nodes")
        self.say(f"starting a {nodes}-node Slurm cluster (deploy/local-slurm/start.sh)")
        self.cluster = cluster = await asyncio.to_thread(
            start_local_slurm,
            nodes=nodes,
            cluster_name="demo",
            state_dir=s.state_dir / "slurm",
            restd=s.scheduler == "slurmrestd",
            hosts=hosts,
        )
        self.say(f"cluster up in {cluster.start_seconds:.1f} s: {', '.join(cluster.nodes)}")
        await asyncio.to_thread(self._check_job_user_can_train, root, cluster.demo_user)

        ui_port = s.ui_port if not port_open("127.0.0.1", s.ui_port) else free_port()
        # hosts in namespaces: every address of the controller's host (the dev server's own
        # services talk over 127.0.0.1; the nodes reach it on the bridge)
        listen = "0.0.0.0" if hosts == "netns" else "127.0.0.1"  # noqa: S104
        self.server = EmbeddedTemporal(
            state_dir=s.state_dir / "temporal", host=listen, port=free_port(), ui_port=ui_port
        )
        await asyncio.to_thread(self.server.start)
        address = f"{cluster.controller_address}:{self.server.port}"
        self.say(f"Temporal dev server on {address}; web UI: {self.server.ui_url}")
        self._collector_port = free_port() if hosts == "netns" else 0
        config = self._config(cluster, address)
        if hosts == "netns":  # the collector's key, there before the collector starts
            key_file = config.liveness.key_file
            key_file.write_text(os.urandom(32).hex())
            key_file.chmod(0o600)
        client = await connect(config.temporal, attempts=20)
        stop = asyncio.Event()
        # slurmrestd: the backend the configuration names, built as a site's service builds it
        scheduler = cluster.scheduler() if s.scheduler == "cli" else None
        service = asyncio.create_task(
            run_service(config, ServiceParts(), stop, client=client, scheduler=scheduler)
        )
        gpus: dict[str, FakeNvml] = {}
        agents: list[asyncio.Task[None]] = []
        if self.scenario.node_agents and hosts == "netns":
            self.agent_processes = _start_agent_processes(cluster, config, s.state_dir)
            self.say(f"node agents running on the hosts of {', '.join(cluster.nodes)}")
        elif self.scenario.node_agents:
            # A GPU that fails shows in its node's kernel log and NVML, not only in what the
            # job prints; resurrect drains a node only when such a second source agrees.
            agents = _start_node_agents(cluster, client, config, stop, gpus)
            self.say(f"node agents running on {', '.join(cluster.nodes)} (simulated GPUs)")
        try:
            ui = self.server.ui_url or ""
            played = self._play(root, cluster, client, config, ui, gpus)
            return await _while_serving(played, service)
        finally:
            stop.set()
            for process in self.agent_processes:
                process.terminate()
            with contextlib.suppress(Exception):
                await asyncio.wait_for(asyncio.gather(service, *agents), timeout=30)
            for process in self.agent_processes:
                with contextlib.suppress(subprocess.TimeoutExpired):
                    process.wait(timeout=10)

    async def _play(
        self,
        root: Path,
        cluster: LocalSlurm,
        client: Client,
        config: ResurrectConfig,
        ui: str,
        gpus: dict[str, FakeNvml],
    ) -> dict[str, Any]:
        """Submit the job, train until the fault, play the scenario; its result."""
        stage = await self._submit(root, cluster, client, config, ui)
        stage.simulated_gpus = gpus
        victim = await self._train_until_fault(stage)
        result = await self.scenario.play(stage, victim)
        return {**result, **self._setup_facts(config)}

    async def _submit(
        self, root: Path, cluster: LocalSlurm, client: Client, config: ResurrectConfig, ui: str
    ) -> Stage:
        """Submit the training job the scenario asks for, as the demo user."""
        s = self.settings
        ckpt_dir = cluster.out_dir / f"ckpt-{s.scenario}-{int(time.time())}"
        ckpt_dir.mkdir(parents=True)
        shutil.chown(ckpt_dir, user=cluster.demo_user)
        hold_step = self.scenario.checkpoint_before_fault(s)
        holds = self.scenario.holds_for_fault and hold_step is not None
        hold_file = cluster.out_dir / f"release-{ckpt_dir.name}" if holds else None
        hold = (
            {
                "RESURRECT_TRAIN_HOLD_AFTER_STEP": str(hold_step),
                "RESURRECT_TRAIN_HOLD_UNTIL": str(hold_file),
            }
            if hold_file
            else {}
        )
        section = {**self.scenario.comment(s), "checkpoint_dir": str(ckpt_dir)}
        comment = json.dumps({"resurrect": section}, separators=(",", ":"))
        env = {
            "RESURRECT_PYTHON": s.python,
            "RESURRECT_TRAIN_DIR": str(root / "examples" / "train"),
            "CKPT_DIR": str(ckpt_dir),
            "RESURRECT_TRAIN_STEPS": str(self.scenario.train_steps(s)),
            "RESURRECT_TRAIN_CKPT_EVERY": str(s.ckpt_every),
            "RESURRECT_TRAIN_SLEEP": str(s.step_sleep_s),
            # local clusters on one host all number jobs from 1: each its own rendezvous ports
            "RESURRECT_MASTER_PORT_BASE": str(rendezvous_port_base()),
            **cluster.job_network_env,
            **self.scenario.job_env(s),
            **hold,
        }
        exports = ",".join(["ALL", *(f"{k}={v}" for k, v in env.items())])
        job_id = await asyncio.to_thread(
            cluster.submit,
            (root / "examples" / "train" / "train.sbatch").read_text(),
            comment=comment,
            nodes=JOB_NODES,
            name="resurrect-train",
            extra_args=[f"--export={exports}"],
        )
        self.say(
            f"submitted job {job_id} as {cluster.demo_user}: {JOB_NODES} nodes, torchrun"
            f" (gloo), checkpoints in {ckpt_dir}"
        )
        return Stage(
            settings=s,
            say=self.say,
            root=root,
            cluster=cluster,
            client=client,
            config=config,
            ui_url=ui,
            job_id=job_id,
            ckpt_dir=ckpt_dir,
            train_steps=self.scenario.train_steps(s),
            hold_file=hold_file,
        )

    async def _train_until_fault(self, stage: Stage) -> str:
        """Wait for the job to run and write the checkpoint the scenario wants before its
        fault; the node the fault targets (the job's last)."""
        job = await stage.wait_job(lambda j: j.state is JobState.RUNNING, 120, "the job to run")
        self.say(f"job {stage.job_id} running on {', '.join(job.nodes)}")
        want = self.scenario.checkpoint_before_fault(self.settings)
        if want is None:
            return job.nodes[-1]
        deadline = time.monotonic() + CHECKPOINT_WAIT_S
        while not [x for x in checkpoint_steps(stage.ckpt_dir) if x >= want]:
            if time.monotonic() > deadline:
                raise DemoError(f"job {stage.job_id} wrote no checkpoint of step {want} in time")
            current = await stage.job()
            if current.state is not JobState.RUNNING:
                raise DemoError(
                    f"job {stage.job_id} stopped before the fault: {current.state.value};"
                    f" its output ends:\n{await stage.output_tail()}"
                )
            await asyncio.sleep(0.5)
        self.say(f"checkpoints so far: steps {checkpoint_steps(stage.ckpt_dir)}")
        return job.nodes[-1]

    def _setup_facts(self, config: ResurrectConfig) -> dict[str, Any]:
        """What every result shows of the setup: the UI and the settings timings rest on."""
        return {
            "ui_url": self.server.ui_url if self.server else None,
            "slurm_settings": {
                "SlurmdTimeout": 5,
                "AuthInfo": "cred_expire=5",
                "SchedulerParameters": "sched_interval=2,bf_interval=1",
                "watcher_poll_s": config.watcher.poll_interval_s,
            },
        }

    def _check_job_user_can_train(self, root: Path, user: str) -> None:
        """The job runs as ``user``: it must be able to run this Python and read the job."""
        probe = subprocess.run(
            ["runuser", "-u", user, "--", self.settings.python, "-c",
             "import sys, torch; open(sys.argv[1]).close()",
             str(root / "examples" / "train" / "train.py")],
            capture_output=True, text=True, timeout=120, check=False,
        )  # fmt: skip
        if probe.returncode != 0:
            raise DemoError(
                f"the job user {user} cannot run {self.settings.python} with torch or read"
                f" {root}/examples/train (is a parent directory private, e.g. /root?):"
                f" {probe.stderr.strip()[-300:]}"
            )

    async def close(self) -> None:
        """Stop the Temporal server and the cluster this demo started."""
        if self.server is not None:
            await asyncio.to_thread(self.server.stop)
        if self.cluster is not None:
            await asyncio.to_thread(stop_local_slurm, self.cluster, purge=False)


def _start_agent_processes(
    cluster: LocalSlurm, config: ResurrectConfig, state_dir: Path
) -> list[subprocess.Popen[bytes]]:
    """``resurrect agent run`` on each node's host (hosts in namespaces), heartbeating the
    liveness collector with its node's key; logs in ``state_dir/agent-<node>.log``."""
    import sys

    import yaml

    from resurrect.sensors.liveness.wire import load_key, node_key

    master = load_key(config.liveness.key_file)
    config_path = state_dir / "resurrect.yaml"
    config_path.write_text(yaml.safe_dump(config.model_dump(mode="json")))
    processes = []
    for node in cluster.nodes:
        node_key_file = state_dir / f"liveness-{node}.key"
        node_key_file.write_bytes(node_key(master, config.cluster.name, node))
        node_key_file.chmod(0o600)
        env = {
            **os.environ,
            "RESURRECT_AGENT__COLLECTOR": f"{config.liveness.host}:{config.liveness.port}",
            "RESURRECT_AGENT__COLLECTOR_KEY_FILE": str(node_key_file),
            "RESURRECT_AGENT__INTERVAL_S": "1.0",
            "RESURRECT_AGENT__KERNEL_LOG": "false",
        }
        cli = "import sys; from resurrect.cli import main; sys.exit(main())"
        argv = [sys.executable, "-c", cli, "agent", "run", "--config", str(config_path),
                "--node", node]  # fmt: skip
        with open(state_dir / f"agent-{node}.log", "ab") as log:
            processes.append(
                subprocess.Popen(
                    cluster.on_host(node, argv),
                    env=env,
                    stdout=log,
                    stderr=subprocess.STDOUT,
                    stdin=subprocess.DEVNULL,
                    start_new_session=True,
                )
            )
    return processes


def _start_node_agents(
    cluster: LocalSlurm,
    client: Client,
    config: ResurrectConfig,
    stop: asyncio.Event,
    gpus: dict[str, FakeNvml],
) -> list[asyncio.Task[None]]:
    """One node agent per node, its GPUs simulated (``gpus[node]``, fake NVML)."""
    from resurrect.config import AgentSettings
    from resurrect.rules import load_engine
    from resurrect.sensors.node_agent import FakeNvml, NodeAgent
    from resurrect.sensors.node_agent.reporters import TemporalReporter

    engine = load_engine(config.rules.extra_packs)
    tasks: list[asyncio.Task[None]] = []
    for node in cluster.nodes:
        settings = AgentSettings(node_name=node, kernel_log=False, interval_s=1.0)
        nvml = FakeNvml.with_gpus(2)
        reporter = TemporalReporter(
            client,
            cluster=config.cluster.name,
            task_queue=config.temporal.task_queue,
            settings=settings,
        )
        agent = NodeAgent(settings, nvml=nvml, engine=engine, reporter=reporter)
        gpus[node] = nvml
        tasks.append(asyncio.create_task(agent.run(stop), name=f"agent-{node}"))
    return tasks


async def _while_serving(
    played: Coroutine[Any, Any, dict[str, Any]], service: asyncio.Task[None]
) -> dict[str, Any]:
    """``played``'s result, while resurrect's service runs beside it: a service that stops
    first (it failed to start, or crashed) ends the demo at once with its error, instead of
    leaving the scenario waiting for a recovery that cannot come."""
    playing = asyncio.ensure_future(played)
    await asyncio.wait({playing, service}, return_when=asyncio.FIRST_COMPLETED)
    if playing.done():
        return playing.result()
    playing.cancel()
    with contextlib.suppress(asyncio.CancelledError):
        await playing
    error = service.exception() if not service.cancelled() else None
    raise DemoError(f"resurrect's service stopped before the scenario ended: {error!r}") from error
