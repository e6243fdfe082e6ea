"""Driving a real local Slurm cluster (deploy/local-slurm) from Python: the demo and the
tests use it.

:func:`start_local_slurm` starts a cluster (munged, slurmctld, N slurmd) in its own state
dir on free ports via ``deploy/local-slurm/start.sh``, and returns a :class:`LocalSlurm`
to submit jobs as an unprivileged user, inject node faults and wait for states;
:func:`stop_local_slurm` stops what it started. Needs root and a source checkout (the
scripts under ``deploy/``).

The cluster runs the host's Slurm, or another version (``24.11``, ``26.05``: a Debian
userland that start.sh builds once and caches) named by ``slurm_version`` or the
``RESURRECT_SLURM_VERSION`` environment variable; its client commands are then those of
that version (:attr:`LocalSlurm.bin_dir`, first on :attr:`LocalSlurm.env`'s ``PATH``).
Which versions can run here, and why not, is :mod:`resurrect.demo.slurm_versions` (its
names are exported here too).
"""

from __future__ import annotations

import os
import random
import shlex
import socket
import subprocess
import tempfile
import time
import uuid
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from resurrect.demo.host_namespaces import (
    CONTROLLER,
    NODE_INTERFACE,
    Host,
    on_host,
    on_network_of,
    read_hosts,
)
from resurrect.demo.slurm_versions import (
    SLURM_VERSION_ENV,
    requested_slurm_version,
    restd_unavailable_reason,
    restd_unsupported_reason,
    slurm_unavailable_reason,
)
from resurrect.numbers import is_ascii_digits
from resurrect.scheduler.slurm_cli import SlurmCli
from resurrect.scheduler.slurm_exec import CommandRunner
from resurrect.scheduler.slurm_json import parse_scontrol_record
from resurrect.scheduler.slurm_rest import SlurmRest
from resurrect.scheduler.slurm_rest_client import RestClient

__all__ = [
    "SLURM_VERSION_ENV",
    "LocalSlurm",
    "repo_root",
    "requested_slurm_version",
    "restd_unavailable_reason",
    "restd_unsupported_reason",
    "slurm_unavailable_reason",
    "start_local_slurm",
    "stop_local_slurm",
]

REPO_ROOT = Path(__file__).resolve().parents[2]
DEPLOY_DIR = REPO_ROOT / "deploy" / "local-slurm"


def repo_root() -> Path:
    """The source checkout this module runs from (the demo needs its deploy/ and examples/)."""
    if not (DEPLOY_DIR / "start.sh").is_file():
        raise RuntimeError(
            f"{DEPLOY_DIR}/start.sh not found: run the demo from a source checkout of resurrect"
        )
    return REPO_ROOT


DEMO_USER = "resurrect-demo"


def _port_free(port: int) -> bool:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            s.bind(("127.0.0.1", port))
        except OSError:
            return False
    return True


# Ports the local clusters' daemons take (slurmctld, slurmd, slurmrestd).
DAEMON_PORTS = range(20000, 60000)


def free_port_block(
    count: int, low: int = DAEMON_PORTS.start, high: int = DAEMON_PORTS.stop
) -> int:
    """First port of ``count`` consecutive free TCP ports on 127.0.0.1 (random start)."""
    rng = random.SystemRandom()
    for _ in range(200):
        base = rng.randrange(low, high - count)
        if all(_port_free(base + i) for i in range(count)):
            return base
    raise RuntimeError(f"no block of {count} free ports found")


# Rendezvous ports of the jobs local clusters run (RESURRECT_MASTER_PORT_BASE: the example job
# listens on base + job id * 7 + restart): below the ports the clusters' daemons take
# (DAEMON_PORTS) and below the kernel's ephemeral range (32768 and up on
# Linux), so neither another cluster's daemon nor an outgoing connection holds a job's port.
RENDEZVOUS_BASES = range(10000, 18000)


def rendezvous_port_base(seed: int | None = None) -> int:
    """A RESURRECT_MASTER_PORT_BASE for a job of a local cluster: random, or fixed by ``seed``
    (a soak replays its runs)."""
    if seed is None:
        return random.SystemRandom().choice(RENDEZVOUS_BASES)
    return RENDEZVOUS_BASES[(seed * 7919) % len(RENDEZVOUS_BASES)]


@dataclass
class LocalSlurm:
    """A running local cluster and helpers to drive it from tests."""

    state_dir: Path
    cluster_name: str
    nodes: list[str]
    slurm_conf: str
    env: dict[str, str]
    ctld_port: int
    start_seconds: float
    demo_user: str = DEMO_USER
    bin_dir: Path = Path("/usr/bin")
    sbin_dir: Path = Path("/usr/sbin")
    slurm_version: str = ""
    # "local": every daemon on this host's network; "netns": each node its own host (network
    # and UTS namespace), the controller another (deploy/local-slurm/hosts.sh)
    hosts: str = "local"
    _submitted: list[str] = field(default_factory=list)

    # ------------------------------------------------------------------ hosts
    @property
    def host_map(self) -> dict[str, Host]:
        """The cluster's hosts in namespaces (``ctl``, ``worker``, each node); {} for local."""
        return read_hosts(self.state_dir) if self.hosts == "netns" else {}

    @property
    def controller_address(self) -> str:
        """The address the nodes reach the controller's host at."""
        hosts = self.host_map
        return hosts[CONTROLLER].address if hosts else "127.0.0.1"

    @property
    def job_network_env(self) -> dict[str, str]:
        """What a job's ranks need to find each other here: on hosts in namespaces gloo must
        use the node's link (a node's name resolves nowhere, so it would pick 127.0.0.1)."""
        return {"GLOO_SOCKET_IFNAME": NODE_INTERFACE} if self.hosts == "netns" else {}

    def on_host(self, host: str, argv: list[str]) -> list[str]:
        """``argv`` run on ``host`` (``ctl``, ``worker``, a node); itself for local hosts."""
        return on_host(self.state_dir, host, argv) if self.hosts == "netns" else list(argv)

    def _client_argv(self, argv: list[str]) -> list[str]:
        """A Slurm client's argv: on the controller's host unless this thread is there."""
        hosts = self.host_map
        if not hosts or on_network_of(hosts[CONTROLLER]):
            return list(argv)
        return on_host(self.state_dir, CONTROLLER, argv)

    # ------------------------------------------------------------------ basics
    @property
    def out_dir(self) -> Path:
        """Job output folder, writable by the demo user."""
        return self.state_dir / "out"

    @property
    def health_check_argv(self) -> list[str]:
        """``isolation.health_check_argv`` for this cluster's nodes: check-node.sh, what
        ``resurrect agent check`` is on a real GPU node (``{node}``: the node checked)."""
        return [str(DEPLOY_DIR / "check-node.sh"), "--state-dir", str(self.state_dir), "{node}"]

    def scheduler(self, **kwargs: Any) -> SlurmCli:
        """A SlurmCli bound to this cluster and its version's clients (kwargs go to the
        constructor)."""
        kwargs.setdefault("verify_timeout", 30.0)
        kwargs.setdefault("bin_dir", str(self.bin_dir))
        return SlurmCli(self.cluster_name, self.slurm_conf, **kwargs)

    # ------------------------------------------------------------------ slurmrestd
    @property
    def restd(self) -> dict[str, str]:
        """slurmrestd's ``RESTD_*`` settings (``start_local_slurm(restd=True)``), else {}."""
        info = read_cluster_info(self.state_dir)
        return {k: v for k, v in info.items() if k.startswith("RESTD_")}

    def rest_scheduler(self, command_timeout: float = 30.0, **kwargs: Any) -> SlurmRest:
        """A SlurmRest bound to this cluster's slurmrestd (its unix socket and root token
        file; kwargs go to the constructor). ``scontrol requeuehold`` where the REST API has
        no requeue uses this cluster's clients."""
        restd = self.restd
        if not restd:
            raise RuntimeError(f"{self.state_dir} was started without slurmrestd")
        kwargs.setdefault("verify_timeout", 30.0)
        client = RestClient(
            f"unix:{restd['RESTD_SOCKET']}",
            Path(restd["RESTD_TOKEN_FILE"]),
            timeout=command_timeout,
        )
        runner = CommandRunner(
            bin_dir=str(self.bin_dir), slurm_conf=self.slurm_conf, timeout=command_timeout
        )
        return SlurmRest(self.cluster_name, client, requeue_runner=runner, **kwargs)

    def stop_restd(self) -> None:
        """Stop slurmrestd (the cluster keeps running)."""
        self._script("restd.sh", "stop")

    def start_restd(self) -> None:
        """Start slurmrestd again; returns once its socket is there."""
        self._script("restd.sh", "start")

    def run(self, argv: list[str], *, check: bool = True, timeout: float = 30) -> str:
        """Run a Slurm client command against this cluster; returns stdout."""
        proc = subprocess.run(
            self._client_argv(argv),
            env=self.env, capture_output=True, text=True, timeout=timeout, check=False,
        )  # fmt: skip
        if check and proc.returncode != 0:
            raise RuntimeError(f"{shlex.join(argv)} failed rc={proc.returncode}: {proc.stderr}")
        return proc.stdout

    def _script(self, *args: str) -> str:
        cmd = [str(DEPLOY_DIR / args[0]), "--state-dir", str(self.state_dir), *args[1:]]
        proc = subprocess.run(cmd, capture_output=True, text=True, timeout=60, check=False)
        if proc.returncode != 0:
            raise RuntimeError(f"{shlex.join(cmd)} failed: {proc.stderr}{proc.stdout}")
        return proc.stdout

    # ------------------------------------------------------------------ jobs
    def submit(
        self,
        script_or_argv: str | list[str],
        *,
        user: str | None = None,
        comment: str | None = None,
        nodes: int = 2,
        name: str | None = None,
        requeue: bool | None = True,
        exclude: Iterable[str] = (),
        output: str | None = None,
        extra_args: Iterable[str] = (),
    ) -> str:
        """sbatch as ``user`` (never root) and return the job id.

        A string is a batch script (written to the out dir); a list is a command wrapped with
        ``--wrap``. ``requeue``: True ``--requeue``, False ``--no-requeue``, None default.
        """
        who = user or self.demo_user
        args = [f"--nodes={nodes}", f"--chdir={self.out_dir}", "--parsable"]
        args.append(f"--output={output or str(self.out_dir / '%x-%j.out')}")
        if name:
            args.append(f"--job-name={name}")
        if comment is not None:
            args.append(f"--comment={comment}")
        if requeue is True:
            args.append("--requeue")
        elif requeue is False:
            args.append("--no-requeue")
        excl = list(exclude)
        if excl:
            args.append(f"--exclude={','.join(excl)}")
        args += list(extra_args)
        if isinstance(script_or_argv, str):
            path = self.out_dir / f"job-{uuid.uuid4().hex[:8]}.sh"
            text = script_or_argv
            if not text.startswith("#!"):
                text = "#!/bin/bash\n" + text
            path.write_text(text)
            path.chmod(0o755)
            args.append(str(path))
        else:
            args.append(f"--wrap={shlex.join(script_or_argv)}")
        sbatch = str(self.bin_dir / "sbatch")
        argv = ["runuser", "-u", who, "--", "env", f"SLURM_CONF={self.slurm_conf}", sbatch, *args]
        job_id = self.run(argv).strip().split(";")[0]
        if not is_ascii_digits(job_id):
            raise RuntimeError(f"sbatch gave no job id: {job_id!r}")
        self._submitted.append(job_id)
        return job_id

    def job(self, job_id: str) -> dict[str, str]:
        """``scontrol show job -o`` as a dict (JobState, Reason, Restarts, NodeList, ...)."""
        return parse_scontrol_record(self.run(["scontrol", "show", "job", "-o", job_id]))

    def node(self, name: str) -> dict[str, str]:
        """``scontrol show node -o`` as a dict (State, Reason, ...)."""
        return parse_scontrol_record(self.run(["scontrol", "show", "node", "-o", name]))

    def wait_job_state(
        self, job_id: str, states: Iterable[str], timeout: float = 60, poll: float = 0.25
    ) -> dict[str, str]:
        """Wait until the job's JobState is one of ``states``; returns its record."""
        wanted = set(states)
        return self._wait(
            lambda: self.job(job_id),
            lambda r: r.get("JobState") in wanted,
            timeout,
            poll,
            f"job {job_id} in {sorted(wanted)}",
        )

    def wait_node_state(
        self,
        name: str,
        states: Iterable[str] | Callable[[dict[str, str]], bool],
        timeout: float = 60,
        poll: float = 0.25,
    ) -> dict[str, str]:
        """Wait until the node's State (e.g. ``IDLE``, ``DOWN+NOT_RESPONDING``) matches.

        ``states``: base states matched against the part before ``+`` or ``*``, or a predicate
        on the ``scontrol show node`` record.
        """
        if callable(states):
            pred = states
            what = f"node {name} matches predicate"
        else:
            wanted = {s.upper() for s in states}

            def pred(r: dict[str, str]) -> bool:
                return r.get("State", "").split("+")[0].rstrip("*") in wanted

            what = f"node {name} in {sorted(wanted)}"
        return self._wait(lambda: self.node(name), pred, timeout, poll, what)

    @staticmethod
    def _wait(
        get: Callable[[], dict[str, str]],
        ok: Callable[[dict[str, str]], bool],
        timeout: float,
        poll: float,
        what: str,
    ) -> dict[str, str]:
        deadline = time.monotonic() + timeout
        last: dict[str, str] = {}
        while True:
            try:
                last = get()
                if ok(last):
                    return last
            except RuntimeError:
                pass
            if time.monotonic() >= deadline:
                raise TimeoutError(f"timed out after {timeout}s waiting for {what}; last: {last}")
            time.sleep(poll)

    # ------------------------------------------------------------------ faults
    def kill_node(self, name: str) -> str:
        """SIGKILL slurmd of ``name`` and every process of its job steps."""
        return self._script("inject.sh", "kill-node", name)

    def freeze_node(self, name: str) -> str:
        return self._script("inject.sh", "freeze-node", name)

    def thaw_node(self, name: str) -> str:
        return self._script("inject.sh", "thaw-node", name)

    def start_node(self, name: str) -> str:
        return self._script("inject.sh", "start-node", name)

    # hosts in namespaces only (start_local_slurm(hosts="netns"))
    def partition(self, name: str, way: str = "both") -> str:
        """Cut node ``name`` from the controller (``both``, ``in``: what the controller sends,
        ``out``: what the node sends); its processes live on."""
        return self._script("inject.sh", "partition", name, way)

    def agent_partition(self, name: str, collector_port: int) -> str:
        """Drop only node ``name``'s datagrams to the liveness collector."""
        return self._script("inject.sh", "agent-partition", name, str(collector_port))

    def worker_partition(self, temporal_port: int) -> str:
        """Cut the worker's host from Temporal's port on the controller."""
        return self._script("inject.sh", "worker-partition", str(temporal_port))

    def freeze_host(self, name: str) -> str:
        """Stop every process of node ``name``'s host at once (freezer cgroup)."""
        return self._script("inject.sh", "freeze-host", name)

    def thaw_host(self, name: str) -> str:
        return self._script("inject.sh", "thaw-host", name)

    def crash_host(self, name: str) -> str:
        """SIGKILL every process of node ``name``'s host at once."""
        return self._script("inject.sh", "crash-host", name)

    def lossy(self, name: str, loss_pct: int, delay_ms: int = 0) -> str:
        """Lose ``loss_pct`` % (and delay) of the packets on node ``name``'s link."""
        return self._script("inject.sh", "lossy", name, str(loss_pct), str(delay_ms))

    def heal(self, name: str = "all") -> str:
        """End every partition, cut and loss of host ``name`` (or every host)."""
        return self._script("inject.sh", "heal", name)

    def stop_controller(self) -> None:
        """Stop slurmctld (state is saved; :meth:`start_controller` brings it back)."""
        pid = int((self.state_dir / "run" / "slurmctld.pid").read_text().strip())
        os.kill(pid, 15)
        deadline = time.monotonic() + 20
        while Path(f"/proc/{pid}").exists() and time.monotonic() < deadline:
            time.sleep(0.1)

    def start_controller(self) -> None:
        """Start slurmctld again, keeping its saved state (jobs, drains)."""
        argv = self.on_host(CONTROLLER, [str(self.sbin_dir / "slurmctld")])
        subprocess.run(argv, env=self.env, check=True, timeout=30)
        self._wait(
            lambda: {"ok": str(bool(self.run(["sinfo", "-h"], check=False)))},
            lambda r: r["ok"] == "True",
            30,
            0.2,
            "slurmctld answers",
        )

    def install_triggers(self, program: str, events: Iterable[str] = ("down", "drained")) -> str:
        """Permanent ``strigger --set --node --<event> --program=PROGRAM`` triggers (push hooks;
        slurmctld runs PROGRAM with the node list ~15-30 s after the event)."""
        return self._script(
            "install-triggers.sh", "--program", program, "--events", ",".join(events)
        )

    # ------------------------------------------------------------------ isolation
    def reset(self, timeout: float = 60) -> None:
        """Cancel every job of this (private) cluster, restart dead or frozen nodes, resume
        drained ones, and wait until every node is idle: call between tests sharing a
        session cluster."""
        live = self.run(["squeue", "-h", "-t", "all", "-o", "%i"], check=False).split()
        ids = sorted(set(live) | set(self._submitted))
        if ids:
            self.run(["scancel", *ids], check=False)
        for name in self.nodes:
            self.start_node(name)
        for name in self.nodes:
            state = self.node(name).get("State", "")
            if "DRAIN" in state or "DOWN" in state or "FAIL" in state:
                self.run(["scontrol", "update", f"NodeName={name}", "State=RESUME"], check=False)
        for name in self.nodes:
            self.wait_node_state(name, lambda r: r.get("State", "") == "IDLE", timeout=timeout)


def start_local_slurm(
    nodes: int = 4,
    cluster_name: str | None = None,
    node_prefix: str = "node",
    jobcomp_script: str | None = None,
    state_dir: Path | None = None,
    slurm_version: str | None = None,
    slurmctld_parameters: str | None = None,
    restd: bool = False,
    hosts: str = "local",
    prolog: str | None = None,
) -> LocalSlurm:
    """Start a cluster via deploy/local-slurm/start.sh on free ports, in ``state_dir``
    (wiped first) or a fresh ``/tmp/resurrect-slurm-*``.

    ``jobcomp_script``: JobCompType=jobcomp/script with this program (runs at every job end).
    ``slurm_version``: ``22.05``, ``24.11`` or ``26.05`` (default: ``RESURRECT_SLURM_VERSION``,
    else the host's Slurm). ``slurmctld_parameters``: ``SlurmctldParameters=`` of the cluster
    (e.g. ``enable_expedited_requeue`` on 25.11+). ``restd``: also slurmrestd (auth/jwt) on a
    unix socket and a free port, with a root token (:meth:`LocalSlurm.rest_scheduler`).
    ``hosts``: ``local`` (every daemon on this host's network) or ``netns`` (each node its own
    network and UTS namespace, the controller another: deploy/local-slurm/hosts.sh).
    ``prolog``: ``Prolog=`` of the cluster (e.g. deploy/local-slurm/prolog-fail-marked.sh).
    """
    version = slurm_version or requested_slurm_version()
    if state_dir is None:
        state_dir = Path(tempfile.mkdtemp(prefix="resurrect-slurm-", dir="/tmp"))
    else:
        state_dir.mkdir(parents=True, exist_ok=True)
    state_dir.chmod(0o755)
    name = cluster_name or f"t{uuid.uuid4().hex[:8]}"
    slurmd_port = free_port_block(nodes)
    ctld_port = free_port_block(1)
    while slurmd_port <= ctld_port < slurmd_port + nodes:
        ctld_port = free_port_block(1)
    argv = [
        str(DEPLOY_DIR / "start.sh"),
        "--state-dir",
        str(state_dir),
        "--cluster-name",
        name,
        "--nodes",
        str(nodes),
        "--node-prefix",
        node_prefix,
        "--ctld-port",
        str(ctld_port),
        "--slurmd-port",
        str(slurmd_port),
        "--hosts",
        hosts,
    ]
    if jobcomp_script:
        argv += ["--jobcomp-script", jobcomp_script]
    if version:
        argv += ["--slurm", version]
    if slurmctld_parameters:
        argv += ["--slurmctld-parameters", slurmctld_parameters]
    if prolog:
        argv += ["--prolog", prolog]
    if restd:
        restd_port = free_port_block(1)
        while slurmd_port <= restd_port < slurmd_port + nodes or restd_port == ctld_port:
            restd_port = free_port_block(1)
        argv += ["--restd", "--restd-port", str(restd_port)]
    if os.environ.get("RESURRECT_REQUIRE_SLURM") is None:
        argv.append("--no-install")
    t0 = time.monotonic()
    proc = subprocess.run(argv, capture_output=True, text=True, timeout=300, check=False)
    elapsed = time.monotonic() - t0
    if proc.returncode != 0:
        subprocess.run([str(DEPLOY_DIR / "stop.sh"), "--state-dir", str(state_dir)], check=False)
        raise RuntimeError(f"start.sh failed (rc={proc.returncode}):\n{proc.stderr}\n{proc.stdout}")
    slurm_conf = str(state_dir / "etc" / "slurm.conf")
    info = read_cluster_info(state_dir)
    bin_dir = Path(info.get("BIN_DIR", "/usr/bin"))
    env = dict(os.environ)
    env["SLURM_CONF"] = slurm_conf
    env["LC_ALL"] = "C"
    env["PATH"] = os.pathsep.join([str(bin_dir), env.get("PATH", "/usr/bin:/bin")])
    return LocalSlurm(
        state_dir=state_dir,
        cluster_name=name,
        nodes=[f"{node_prefix}{i}" for i in range(1, nodes + 1)],
        slurm_conf=slurm_conf,
        env=env,
        ctld_port=ctld_port,
        start_seconds=elapsed,
        bin_dir=bin_dir,
        sbin_dir=Path(info.get("SBIN_DIR", "/usr/sbin")),
        slurm_version=info.get("SLURM_VERSION", ""),
        hosts=info.get("HOSTS", "local"),
    )


def read_cluster_info(state_dir: Path) -> dict[str, str]:
    """The ``KEY=value`` lines start.sh wrote to ``state_dir/cluster.info``."""
    info: dict[str, str] = {}
    for line in (state_dir / "cluster.info").read_text().splitlines():
        key, sep, value = line.partition("=")
        if sep:
            info[key.strip()] = value.strip()
    return info


def stop_local_slurm(cluster: LocalSlurm, purge: bool = True) -> None:
    """Stop what start.sh started (by pidfile); delete the state dir unless purge=False."""
    argv = [str(DEPLOY_DIR / "stop.sh"), "--state-dir", str(cluster.state_dir)]
    if purge and not os.environ.get("RESURRECT_KEEP_SLURM_STATE"):
        argv.append("--purge")
    subprocess.run(argv, capture_output=True, text=True, timeout=120, check=False)
