"""Every metric resurrect exports, in one place (names as Prometheus shows them).

Instruments come from the OpenTelemetry API's global meter provider: until a process calls
:func:`resurrect.telemetry.setup.start_telemetry` they record nothing and cost next to
nothing. Label values are bounded sets (fault classes, outcomes, sources, activity names)
except ``job_id`` on the per-job gauges.
"""

from __future__ import annotations

from opentelemetry import metrics

METER = metrics.get_meter("resurrect")

# Durations of recoveries are seconds to minutes; sensor and poll timings are sub-second.
RECOVERY_BUCKETS = (0.5, 1, 2, 3, 5, 7.5, 10, 15, 20, 30, 45, 60, 90, 120, 300, 600, 1800)
FAST_BUCKETS = (0.001, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30)

RECOVERIES = METER.create_counter(
    "resurrect_recoveries",
    unit="1",
    description="Recoveries finished, by cluster, fault class and outcome",
)
TIME_TO_DETECT = METER.create_histogram(
    "resurrect_time_to_detect_seconds",
    unit="s",
    description="Earliest evidence of the fault until the recovery started",
    explicit_bucket_boundaries_advisory=RECOVERY_BUCKETS,
)
TIME_TO_RECOVER = METER.create_histogram(
    "resurrect_time_to_recover_seconds",
    unit="s",
    description="Recovery started until it ended (for a recovered job: running again)",
    explicit_bucket_boundaries_advisory=RECOVERY_BUCKETS,
)
NODES_DRAINED = METER.create_counter(
    "resurrect_nodes_drained", unit="1", description="Nodes drained by recoveries"
)
NODES_DRAINED_NOW = METER.create_gauge(
    "resurrect_nodes_drained_now", unit="1", description="Nodes drained by resurrect right now"
)
NODES_RETURNED = METER.create_counter(
    "resurrect_nodes_returned", unit="1", description="Nodes resurrect drained and resumed"
)
RESTARTS_CHARGED = METER.create_gauge(
    "resurrect_restart_budget_used",
    unit="1",
    description="Restarts charged to the job's max_restarts budget before this recovery",
)
STEP_DURATION = METER.create_histogram(
    "resurrect_step_duration_seconds",
    unit="s",
    description="Recovery activities (evidence, attribution, plan steps) by name and result",
    explicit_bucket_boundaries_advisory=RECOVERY_BUCKETS,
)
SENSOR_LAG = METER.create_histogram(
    "resurrect_sensor_lag_seconds",
    unit="s",
    description="A sensor's observation of a fault until its report reached Temporal",
    explicit_bucket_boundaries_advisory=FAST_BUCKETS,
)
REPORTS = METER.create_counter(
    "resurrect_interruption_reports", unit="1", description="Interruptions reported, by source"
)
WATCHER_POLL = METER.create_histogram(
    "resurrect_watcher_poll_seconds",
    unit="s",
    description="One Slurm watcher poll (jobs and nodes)",
    explicit_bucket_boundaries_advisory=FAST_BUCKETS,
)
SCHEDULER_COMMAND = METER.create_histogram(
    "resurrect_scheduler_command_seconds",
    unit="s",
    description="One Slurm command (squeue, sinfo, scontrol ...)",
    explicit_bucket_boundaries_advisory=FAST_BUCKETS,
)
SCHEDULER_BYTES = METER.create_counter(
    "resurrect_scheduler_output_bytes",
    unit="By",
    description="Bytes Slurm commands printed (what polling costs)",
)
FOLLOWER_LAG = METER.create_histogram(
    "resurrect_follower_lag_seconds",
    unit="s",
    description="A job output file's last write until the log follower read it",
    explicit_bucket_boundaries_advisory=FAST_BUCKETS,
)
FOLLOWER_BYTES = METER.create_counter(
    "resurrect_follower_read_bytes", unit="By", description="Job output bytes the follower read"
)
AGENT_HEARTBEATS = METER.create_counter(
    "resurrect_agent_heartbeats", unit="1", description="Node agent heartbeats sent, by result"
)
AGENT_READINGS = METER.create_counter(
    "resurrect_agent_readings", unit="1", description="Node agent readings taken, by kind"
)
JOB_GOODPUT = METER.create_gauge(
    "resurrect_job_goodput_ratio",
    unit="1",
    description="Productive time over wall time of an opted-in job (recent or interrupted)",
)
JOB_LOST = METER.create_gauge(
    "resurrect_job_lost_seconds",
    unit="s",
    description="A job's lost time by part (detection, recovery, queue, recompute, startup)",
)
