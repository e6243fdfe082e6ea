"""The what-if simulator: checked against the closed form, the expected-goodput model and a
recorded real node loss; each knob moves what it should."""

from __future__ import annotations

from pathlib import Path

import pytest

from resurrect.errors import ConfigError
from resurrect.goodput.interval import expected_goodput, optimal_interval, young_interval
from resurrect.goodput.report import GoodputReport
from resurrect.goodput.simulate.measure import inputs_from_report
from resurrect.goodput.simulate.model import SimInputs, SimJob, WhatIf
from resurrect.goodput.simulate.run import best_interval, scenario, simulate

FIXTURES = Path(__file__).resolve().parents[2] / "fixtures" / "goodput"
DAY = 86400.0


def constant(
    *,
    rate: float = 0.01,
    nodes: int = 16,
    jobs: int = 2,
    days: float = 40,
    phases: dict[str, float] | None = None,
    **cluster: object,
) -> SimInputs:
    """Identical long jobs, one fault class at a constant rate, constant phase times."""
    phases = phases or {"detection": 30, "recovery": 60, "queue": 10, "startup": 0}
    return SimInputs.model_validate(
        {
            "cluster_nodes": nodes * jobs,
            "period_s": days * DAY,
            "jobs": [
                SimJob(
                    job_id=str(i), nodes=nodes, work_s=days * DAY, checkpoint_interval_s=1800,
                    save_s=60,
                )
                for i in range(jobs)
            ],
            "rates_per_node_hour": {"process.crash": rate},
            "samples_s": {phase: [seconds] for phase, seconds in phases.items()},
            **cluster,
        }
    )  # fmt: skip


def test_with_constant_rates_the_simulated_goodput_is_the_models() -> None:
    inputs = constant()
    mtbf = 3600 / (0.01 * 16)
    for interval in (600.0, 1800.0, 5400.0):
        simulated = scenario(
            inputs, WhatIf(checkpoint_interval_s=interval), "what-if", seed=1, replications=4
        ).goodput
        assert simulated == pytest.approx(expected_goodput(interval, 60, mtbf, 100), rel=0.02)


def test_with_constant_rates_the_best_interval_agrees_with_the_closed_form() -> None:
    inputs = constant()
    mtbf = 3600 / (0.01 * 16)
    model = optimal_interval(60, mtbf)
    candidates = [model * f for f in (0.4, 0.55, 0.7, 0.85, 1.0, 1.2, 1.45, 1.75, 2.2)]
    simulated = best_interval(inputs, candidates, seed=7, replications=6)
    assert simulated == pytest.approx(young_interval(60, mtbf), rel=0.10)
    assert simulated == pytest.approx(model, rel=0.10)


def test_replaying_a_recorded_real_node_loss_predicts_its_measured_goodput() -> None:
    # one job on two nodes of the local Slurm cluster, one node lost and recovered
    # (tests/e2e/test_observability_on_slurm.py's scenario, its goodput report as recorded)
    report = GoodputReport.model_validate_json((FIXTURES / "node-loss-report.json").read_text())
    (measured,) = report.jobs
    inputs = inputs_from_report(report, replay=True)
    result = simulate(inputs, WhatIf(detect_s=60))
    recorded, what_if, manual = result.scenarios
    assert measured.goodput is not None and recorded.goodput_with_saves is not None
    # the report counts saves as productive (its progress lines go on across them)
    assert recorded.goodput_with_saves == pytest.approx(measured.goodput, rel=0.05)
    assert recorded.interruptions == 1 and recorded.jobs_finished == 1
    assert what_if.goodput is not None and manual.goodput is not None
    assert manual.goodput < what_if.goodput < recorded.goodput  # 1800 s, then 60 s to notice


def test_the_same_seed_gives_the_same_answer_and_another_seed_another() -> None:
    inputs = constant(days=5)
    first = simulate(inputs, WhatIf(detect_s=5), seed=3, replications=2)
    assert simulate(inputs, WhatIf(detect_s=5), seed=3, replications=2) == first
    assert simulate(inputs, WhatIf(detect_s=5), seed=4, replications=2) != first


def test_faster_detection_and_automation_pay_off() -> None:
    inputs = constant(days=10)
    result = simulate(inputs, WhatIf(detect_s=1, manual_response_s=3600), replications=3)
    recorded, what_if, manual = (s.goodput or 0.0 for s in result.scenarios)
    assert manual < recorded < what_if
    lost = {s.scenario: s.lost_gpu_hours for s in result.scenarios}
    assert lost["manual"] > lost["recorded"] > lost["what-if"]


def test_a_spent_drain_budget_leaves_a_faulty_node_in_service_to_fail_the_next_job() -> None:
    inputs = constant(
        rate=0.02, jobs=4, nodes=4, days=10, drain_budget=100, repair_s=3600.0
    ).model_copy(update={"rates_per_node_hour": {"gpu.hardware": 0.02}})
    budget = scenario(inputs, WhatIf(), "recorded", seed=0, replications=2)
    spent = scenario(inputs, WhatIf(drain_budget=0, spares=2), "what-if", seed=0, replications=2)
    assert budget.drains > 0 and budget.drains_refused == 0
    assert spent.drains == 0 and spent.drains_refused > 0
    # faulty nodes stay in service, fail other jobs and shrink the usable cluster
    assert (spent.goodput or 0) < (budget.goodput or 0)
    assert spent.lost_gpu_hours > budget.lost_gpu_hours


def test_spares_shorten_the_wait_for_a_repaired_node() -> None:
    inputs = constant(
        rate=0.02, jobs=4, nodes=4, days=10, repair_s=6 * 3600.0, drain_budget=100
    ).model_copy(update={"rates_per_node_hour": {"node.lost": 0.02}})
    without = scenario(inputs, WhatIf(), "what-if", seed=0, replications=2)
    spared = scenario(inputs, WhatIf(spares=4), "what-if", seed=0, replications=2)
    assert spared.lost_node_hours_by_part["queue"] < without.lost_node_hours_by_part["queue"]
    assert (spared.goodput or 0) > (without.goodput or 0)


def test_what_if_knobs_are_parsed_strictly() -> None:
    knobs = WhatIf.parse("detect_s=10,checkpoint_interval_s=1800,drain_budget=4,spares=8")
    assert (knobs.detect_s, knobs.checkpoint_interval_s, knobs.drain_budget, knobs.spares) == (
        10,
        1800,
        4,
        8,
    )
    assert WhatIf.parse("manual_response_s=900").manual_response_s == 900
    for bad in ("detect_s", "colour=red", "spares=-1", "detect_s=1,detect_s=2", "spares=x"):
        with pytest.raises(ConfigError):
            WhatIf.parse(bad)
