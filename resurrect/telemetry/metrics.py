"""Every metric resurrect exports, in one place (names as Prometheus shows them).

Instruments come from the OpenTelemetry API's global meter provider: until a process calls
:func:`resurrect.telemetry.setup.start_telemetry` they record nothing and cost next to
nothing. Label values are bounded sets (fault classes, outcomes, sources, activity names, the first
:data:`~resurrect.telemetry.record.MAX_UNKNOWN_SHAPES` shapes of unknown diagnoses) except
``job_id`` on the per-job gauges and ``node`` on the lemon score (nodes with an incident on
record).
"""

from __future__ import annotations

from opentelemetry import metrics
from opentelemetry.metrics import Counter, Histogram
from opentelemetry.metrics import _Gauge as Gauge

METER = metrics.get_meter("resurrect")

# Durations of recoveries are seconds to minutes; sensor and poll timings are sub-second.
RECOVERY_BUCKETS = (0.5, 1, 2, 3, 5, 7.5, 10, 15, 20, 30, 45, 60, 90, 120, 300, 600, 1800)
FAST_BUCKETS = (0.001, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30)


def _counter(name: str, description: str, unit: str = "1") -> Counter:
    return METER.create_counter(name, unit=unit, description=description)


def _gauge(name: str, description: str, unit: str = "1") -> Gauge:
    return METER.create_gauge(name, unit=unit, description=description)


def _seconds(name: str, description: str, buckets: tuple[float, ...]) -> Histogram:
    """A histogram of durations in seconds, with ``buckets`` as its advised boundaries."""
    return METER.create_histogram(
        name, unit="s", description=description, explicit_bucket_boundaries_advisory=buckets
    )


RECOVERIES = _counter(
    "resurrect_recoveries", "Recoveries finished, by cluster, fault class and outcome"
)
TIME_TO_DETECT = _seconds(
    "resurrect_time_to_detect_seconds",
    "Earliest evidence of the fault until the recovery started",
    RECOVERY_BUCKETS,
)
TIME_TO_RECOVER = _seconds(
    "resurrect_time_to_recover_seconds",
    "Recovery started until it ended (for a recovered job: running again)",
    RECOVERY_BUCKETS,
)
UNKNOWN_DIAGNOSES = _counter(
    "resurrect_unknown_diagnoses",
    "Diagnoses of unknown, by cluster and the shape of their first fatal-looking line (an"
    " exception's name, a FATAL log line's source file, check-failed, panic; none: no such line)",
)
NODES_DRAINED = _counter("resurrect_nodes_drained", "Nodes drained by recoveries")
NODES_DRAINED_NOW = _gauge("resurrect_nodes_drained_now", "Nodes drained by resurrect right now")
NODES_RETURNED = _counter("resurrect_nodes_returned", "Nodes resurrect drained and resumed")
NODE_LEMON_SCORE = _gauge(
    "resurrect_node_lemon_score",
    "A node's lemon score: its decayed, evidence-weighted incidents per node in service",
)
OTHER_RELEASE_POLLERS = _gauge(
    "resurrect_other_release_pollers",
    "Workers of another resurrect release seen polling this worker's task queues (should be 0)",
)
RESTARTS_CHARGED = _gauge(
    "resurrect_restart_budget_used",
    "Restarts charged to the job's max_restarts budget before this recovery",
)
STEP_DURATION = _seconds(
    "resurrect_step_duration_seconds",
    "Recovery activities (evidence, attribution, plan steps) by name and result",
    RECOVERY_BUCKETS,
)
SENSOR_LAG = _seconds(
    "resurrect_sensor_lag_seconds",
    "A sensor's observation of a fault until its report reached Temporal",
    FAST_BUCKETS,
)
REPORTS = _counter("resurrect_interruption_reports", "Interruptions reported, by source")
WATCHER_POLL = _seconds(
    "resurrect_watcher_poll_seconds", "One Slurm watcher poll (jobs and nodes)", FAST_BUCKETS
)
SCHEDULER_COMMAND = _seconds(
    "resurrect_scheduler_command_seconds",
    "One Slurm command (squeue, sinfo, scontrol ...)",
    FAST_BUCKETS,
)
SCHEDULER_BYTES = _counter(
    "resurrect_scheduler_output_bytes", "Bytes Slurm commands printed (what polling costs)", "By"
)
FOLLOWER_LAG = _seconds(
    "resurrect_follower_lag_seconds",
    "A job output file's last write until the log follower read it",
    FAST_BUCKETS,
)
FOLLOWER_BYTES = _counter(
    "resurrect_follower_read_bytes", "Job output bytes the follower read", "By"
)
AGENT_HEARTBEATS = _counter("resurrect_agent_heartbeats", "Node agent heartbeats sent, by result")
AGENT_READINGS = _counter("resurrect_agent_readings", "Node agent readings taken, by kind")
JOB_GOODPUT = _gauge(
    "resurrect_job_goodput_ratio",
    "Productive time over wall time of an opted-in job (recent or interrupted)",
)
JOB_LOST = _gauge(
    "resurrect_job_lost_seconds",
    "A job's lost time by part (detection, recovery, queue, recompute, startup)",
    "s",
)
JOB_SAVE = _gauge(
    "resurrect_job_checkpoint_save_seconds",
    "A job's median measured checkpoint save time (from its save lines)",
    "s",
)
JOB_CHECKPOINT_INTERVAL = _gauge(
    "resurrect_job_checkpoint_interval_seconds",
    "A job's measured training time between saves",
    "s",
)
JOB_ADVISED_INTERVAL = _gauge(
    "resurrect_job_advised_checkpoint_interval_seconds",
    "The training time between saves that maximises the job's expected goodput",
    "s",
)
JOB_EXPECTED_GOODPUT = _gauge(
    "resurrect_job_expected_goodput_ratio",
    "A job's expected goodput at its current or at the advised checkpoint interval (interval)",
)
CLUSTER_INTERRUPTION_RATE = _gauge(
    "resurrect_cluster_interruptions_per_node_hour",
    "The cluster's measured interruption rate and its 95% interval (bound: estimate/low/high)",
)
CLUSTER_INTERRUPTION_INCIDENTS = _gauge(
    "resurrect_cluster_interruption_incidents",
    "Interruptions the cluster's rate rests on (its window: 30 days)",
)
