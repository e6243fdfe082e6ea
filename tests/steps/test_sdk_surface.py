import resurrect.sdk as sdk


def test_public_surface_is_pinned() -> None:
    """Plugin authors import exactly these names; changing them is a breaking change."""
    assert sdk.__all__ == [
        "DRAIN_REASON_PREFIX",
        "Diagnosis",
        "FakeScheduler",
        "HealthVerdict",
        "IncidentState",
        "JobInfo",
        "NodeInfo",
        "PermanentStepError",
        "Plugin",
        "RecoveryPlan",
        "Scheduler",
        "StepContext",
        "StepError",
        "StepInput",
        "StepResult",
        "TransientStepError",
        "make_step_input",
        "run_health_check",
        "run_step",
        "step",
    ]
    for name in sdk.__all__:
        assert getattr(sdk, name) is not None
