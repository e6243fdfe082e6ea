"""The scheduler backends by name, and how the configured one is built.

A backend is a name and a :data:`SchedulerFactory` (the cluster settings and the hold-mark key
in, a :class:`~resurrect.scheduler.base.Scheduler` out) in one registry:
:func:`register_scheduler` adds one, and :func:`scheduler_for` builds what
``cluster.scheduler`` names. Built in: ``cli`` (Slurm's command-line clients), ``pyslurm``,
``auto`` (pyslurm when it imports and matches the cluster, else the CLI) and ``slurmrestd``
(:mod:`resurrect.scheduler.slurm_rest`). An installed package adds one (e.g. a Kubernetes
backend) with an entry point in the ``resurrect.schedulers`` group, named as
``cluster.scheduler`` names it, whose object is its factory::

    [project.entry-points."resurrect.schedulers"]
    k8s-jobset = "resurrect_k8s.backend:build"
"""

from __future__ import annotations

import os
import subprocess
from collections.abc import Callable, Iterable
from importlib.metadata import EntryPoint, entry_points
from typing import TYPE_CHECKING, Literal

from resurrect.errors import ConfigError
from resurrect.scheduler.base import Scheduler
from resurrect.scheduler.hold_marker import HoldMarkKey
from resurrect.scheduler.pyslurm_backend import PyslurmScheduler, import_pyslurm, pyslurm_version
from resurrect.scheduler.slurm_cli import SlurmCli, parse_slurm_version
from resurrect.scheduler.slurm_exec import CommandRunner
from resurrect.scheduler.slurm_rest import SlurmRest
from resurrect.scheduler.slurm_rest_client import RestClient, tls_context

if TYPE_CHECKING:
    from resurrect.config import ClusterSettings

SchedulerKind = Literal["auto", "cli", "pyslurm"]
SchedulerFactory = Callable[["ClusterSettings", HoldMarkKey], Scheduler]
ENTRY_POINT_GROUP = "resurrect.schedulers"
_REGISTRY: dict[str, SchedulerFactory] = {}


def register_scheduler(name: str, factory: SchedulerFactory) -> None:
    """Make ``cluster.scheduler: NAME`` build its backend with ``factory``; a name already
    taken by another factory is a ConfigError."""
    known = _REGISTRY.get(name)
    if known is not None and known is not factory:
        raise ConfigError(f"scheduler backend {name!r} is registered twice")
    _REGISTRY[name] = factory


def scheduler_names() -> list[str]:
    """The names ``cluster.scheduler`` may take."""
    return sorted(_REGISTRY)


def scheduler_for(
    cluster: ClusterSettings,
    hold_mark_key: HoldMarkKey | None = None,
    *,
    installed: Iterable[EntryPoint] | None = None,
) -> Scheduler:
    """The backend ``cluster.scheduler`` names, built from ``cluster``: a registered one,
    else the installed entry point of that name (``installed``: the entry points to look
    in, default those of ENTRY_POINT_GROUP)."""
    name = cluster.scheduler
    if name not in _REGISTRY:
        points = installed if installed is not None else entry_points(group=ENTRY_POINT_GROUP)
        found = [point for point in points if point.name == name]
        if len(found) > 1:
            raise ConfigError(f"scheduler backend {name!r} is installed twice: {found}")
        if found:
            try:
                factory = found[0].load()
            except Exception as exc:  # an installed backend that fails to import
                raise ConfigError(
                    f"scheduler backend {name!r} failed to import from {found[0].value}: "
                    f"{type(exc).__name__}: {exc}"
                ) from exc
            if not callable(factory):
                raise ConfigError(f"scheduler backend {name!r}: {found[0].value} is no factory")
            register_scheduler(name, factory)
    factory = _REGISTRY.get(name)
    if factory is None:
        raise ConfigError(
            f"cluster.scheduler {name!r} is not a scheduler backend "
            f"({', '.join(scheduler_names())}, or one installed in {ENTRY_POINT_GROUP})"
        )
    return factory(cluster, hold_mark_key or HoldMarkKey())


def cluster_slurm_version(
    slurm_conf: str | None = None, bin_dir: str | None = None, timeout: float = 10.0
) -> tuple[int, int] | None:
    """(major, minor) of the installed Slurm clients, or None if they cannot be run."""
    runner = CommandRunner(bin_dir=bin_dir, slurm_conf=slurm_conf)
    try:
        out = subprocess.run(
            [runner.resolve("scontrol"), "--version"],
            capture_output=True,
            text=True,
            timeout=timeout,
            env=runner.env,
            check=True,
        ).stdout
        major, minor, _ = parse_slurm_version(out)
    except (OSError, subprocess.SubprocessError, ValueError):
        return None
    return major, minor


def make_scheduler(
    kind: SchedulerKind,
    cluster_name: str,
    slurm_conf: str | None = None,
    *,
    bin_dir: str | None = None,
    command_timeout_s: float = 30.0,
    verify_timeout_s: float = 20.0,
    poll_interval_s: float = 0.25,
    version_probe: Callable[[], tuple[int, int] | None] | None = None,
    hold_mark_key: HoldMarkKey | None = None,
) -> Scheduler:
    """Build the scheduler backend.

    ``cli``: always SlurmCli. ``pyslurm``: PyslurmScheduler or ConfigError if pyslurm is
    missing or does not match the cluster's Slurm. ``auto``: pyslurm only if it imports and
    its (major, minor) equals the cluster's, else SlurmCli. pyslurm reads the cluster from
    ``SLURM_CONF`` in the process environment, so a private ``slurm_conf`` forces the CLI in
    ``auto`` unless it is already the process's SLURM_CONF. ``hold_mark_key`` tags the hold
    marks (the watchdog must use the same one).
    """
    cli = SlurmCli(
        cluster_name,
        slurm_conf,
        bin_dir,
        command_timeout=command_timeout_s,
        verify_timeout=verify_timeout_s,
        poll_interval=poll_interval_s,
    )
    if hold_mark_key is not None:
        cli.hold_mark_key = hold_mark_key
    if kind == "cli":
        return cli
    if kind not in ("auto", "pyslurm"):
        raise ConfigError(f"scheduler kind must be auto, cli or pyslurm, got {kind!r}")
    mod = import_pyslurm()
    have = pyslurm_version(mod) if mod is not None else None
    probe = version_probe or (lambda: cluster_slurm_version(slurm_conf, bin_dir))
    want = probe() if have is not None else None
    conf_ok = slurm_conf is None or os.environ.get("SLURM_CONF") == slurm_conf
    if mod is not None and have is not None and have == want and conf_ok:
        backend = PyslurmScheduler(
            cluster_name, mod, verify_timeout=verify_timeout_s, poll_interval=poll_interval_s
        )
        backend.hold_mark_key = cli.hold_mark_key
        return backend
    if kind == "pyslurm":
        raise ConfigError(
            f"scheduler 'pyslurm' requested but pyslurm {'is missing' if mod is None else have} "
            f"does not match cluster Slurm {want}"
            + ("" if conf_ok else f" (or SLURM_CONF is not {slurm_conf})")
        )
    return cli


def _slurm_factory(kind: SchedulerKind) -> SchedulerFactory:
    def build(cluster: ClusterSettings, key: HoldMarkKey) -> Scheduler:
        return make_scheduler(
            kind,
            cluster.name,
            str(cluster.slurm_conf) if cluster.slurm_conf else None,
            bin_dir=str(cluster.slurm_bin_dir) if cluster.slurm_bin_dir else None,
            command_timeout_s=cluster.command_timeout_s,
            hold_mark_key=key,
        )

    return build


def make_rest_scheduler(cluster: ClusterSettings, hold_mark_key: HoldMarkKey) -> SlurmRest:
    """The slurmrestd backend of ``cluster`` (its URL and token file). Where the REST API
    has no requeue (before Slurm 26.05) it runs ``scontrol requeuehold`` with the token, from
    ``cluster.slurm_bin_dir`` / PATH and ``cluster.slurm_conf``."""
    if cluster.slurmrestd_url is None or cluster.slurmrestd_token_file is None:
        raise ConfigError("scheduler slurmrestd needs slurmrestd_url and slurmrestd_token_file")
    tls = cluster.slurmrestd_tls
    client = RestClient(
        cluster.slurmrestd_url,
        cluster.slurmrestd_token_file,
        user=cluster.slurmrestd_user,
        timeout=cluster.command_timeout_s,
        allow_plaintext=cluster.slurmrestd_allow_plaintext,
        tls=None
        if tls is None
        else tls_context(
            ca_file=tls.server_ca, client_cert=tls.client_cert, client_key=tls.client_key
        ),
    )
    runner = CommandRunner(
        bin_dir=str(cluster.slurm_bin_dir) if cluster.slurm_bin_dir else None,
        slurm_conf=str(cluster.slurm_conf) if cluster.slurm_conf else None,
        timeout=cluster.command_timeout_s,
    )
    backend = SlurmRest(cluster.name, client, requeue_runner=runner)
    backend.hold_mark_key = hold_mark_key
    return backend


for _kind in ("auto", "cli", "pyslurm"):
    register_scheduler(_kind, _slurm_factory(_kind))
register_scheduler("slurmrestd", make_rest_scheduler)
