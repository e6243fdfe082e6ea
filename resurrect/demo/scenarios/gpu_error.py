"""gpu-error: one rank prints a fatal GPU error and hangs while the others block; the node's
agent (simulated NVML) reports the same failure as an Xid, so resurrect drains that node and
the restart is free."""

from __future__ import annotations

from resurrect.demo.scenarios.base import Fault, OneFault
from resurrect.demo.stage import DemoSettings, Stage

FAILING_RANK = 1
# What the node's NVML reports of the same failure: a double-bit ECC error.
ECC_XID = 48


def gpu_error_env(settings: DemoSettings, *, every_attempt: bool = False) -> dict[str, str]:
    """The job's switches for a fatal GPU error on rank 1 at ``fault_after_step`` (on the
    first attempt, or on every attempt that reaches that step)."""
    env = {
        "RESURRECT_TRAIN_FAIL_GPU_AT_STEP": str(settings.fault_after_step),
        "RESURRECT_TRAIN_FAIL_GPU_RANK": str(FAILING_RANK),
    }
    if every_attempt:
        env["RESURRECT_TRAIN_FAIL_GPU_EVERY_ATTEMPT"] = "1"
    return env


def confirm_on_node(stage: Stage, node: str) -> None:
    """The failure as ``node``'s own NVML reports it (the second source resurrect needs)."""
    stage.simulated_gpus[node].emit_xid(gpu=0, xid=ECC_XID)
    stage.say(f"NVML on {node}: Xid {ECC_XID} (double-bit ECC error) on GPU 0")


class GpuError(OneFault):
    name = "gpu-error"
    summary = "a rank prints a fatal GPU error, its node's NVML agrees; that node is drained"
    node_agents = True

    def job_env(self, settings: DemoSettings) -> dict[str, str]:
        return gpu_error_env(settings)

    async def inject(self, stage: Stage, victim: str) -> Fault:
        stage.say(
            f"rank {FAILING_RANK} on {victim} will report a fatal GPU error at step"
            f" {stage.settings.fault_after_step}"
        )
        at, _host = await stage.wait_gpu_error()
        confirm_on_node(stage, victim)
        return Fault(at=at, node=victim)
