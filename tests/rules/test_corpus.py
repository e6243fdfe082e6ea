"""Attribution on real failure logs nobody here wrote (tests/fixtures/real-logs).

The corpus is the shared one (``case-*``, copied from ../shared/corpus/real-logs), the
development corpus mined from public issue threads (``dev/``) and validation sets mined after
the rules were written (``validation*/``, each measured before any change for it); each case
names its source. Specification, as regression floors:

* over the corpus without the held-out sets (``validation/``, ``validation-3/`` .. ``validation-8/``
  and issue 36's per-framework sets: scored untouched, their misses documented in
  docs/attribution.md), at least 95 % of the diagnoses name the labelled class; a held-out set
  keeps at least its floor (85 % for the first two; for the others what they scored untouched);
* no case whose true class is a workload fault or a scheduler outcome is diagnosed as a class
  that drains a node (zero false drains), except the one ``validation-4/`` case it had untouched
  (a gloo peer that simply returned, read as a lost node: the log cannot tell them apart) and the
  two ``validation-frameworks-12/`` had untouched (NCCL setup failures its threads put on the job);
* every in-sample case labelled easy or medium is diagnosed as labelled, one test each (the
  held-out sets' misses are documented in docs/attribution.md, not hidden).
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

import pytest

from resurrect.rules import load_engine
from resurrect.rules.corpus_report import (
    confusion_markdown,
    evaluate,
    evaluate_case,
    find_cases,
    misses_markdown,
)

CORPUS = Path(__file__).resolve().parents[1] / "fixtures" / "real-logs"
MIN_ACCURACY = 0.95


@dataclass(frozen=True)
class Floor:
    """What a held-out set must keep: its share of classes right, its false drains at most."""

    accuracy: float
    false_drains: int = 0


HELD_OUT = {
    "validation": Floor(0.85),
    "validation-3": Floor(0.85),
    "validation-4": Floor(22 / 32, false_drains=1),
    "validation-5": Floor(27 / 32),
    "validation-6": Floor(29 / 32),
    "validation-7": Floor(28 / 36),
    "validation-8": Floor(25 / 30),
    "validation-jax": Floor(8 / 15),
    "validation-tf": Floor(5 / 15),
    "validation-horovod": Floor(8 / 14),
    "validation-other": Floor(0 / 11),
    "validation-frameworks-2": Floor(2 / 8),
    "validation-frameworks-3": Floor(1 / 7),
    "validation-frameworks-4": Floor(5 / 5),
    "validation-frameworks-5": Floor(8 / 13),
    "validation-frameworks-6": Floor(7 / 13),
    "validation-frameworks-7": Floor(7 / 14),
    "validation-frameworks-8": Floor(4 / 10),
    "validation-frameworks-9": Floor(2 / 7),
    "validation-frameworks-10": Floor(11 / 22),
    "validation-frameworks-11": Floor(22 / 25),
    "validation-frameworks-12": Floor(16 / 30, false_drains=2),
    "validation-frameworks-13": Floor(18 / 26),
    "validation-frameworks-14": Floor(13 / 20),
    "validation-frameworks-15": Floor(17 / 22),
    "validation-frameworks-16": Floor(18 / 22),
    "validation-frameworks-17": Floor(13 / 21),
    "validation-frameworks-18": Floor(14 / 22),
    "validation-frameworks-19": Floor(12 / 15),
    "validation-frameworks-20": Floor(14 / 16),
    "validation-frameworks-21": Floor(6 / 12),
    "validation-frameworks-22": Floor(7 / 12),
    "validation-frameworks-23": Floor(10 / 11),
    "validation-frameworks-24": Floor(4 / 12),
    "validation-frameworks-25": Floor(8 / 12),
    "validation-frameworks-26": Floor(10 / 15),
    "validation-frameworks-27": Floor(8 / 15),
    "validation-frameworks-28": Floor(8 / 12),
    "validation-frameworks-29": Floor(3 / 12),
    "validation-frameworks-30": Floor(9 / 12),
    "validation-frameworks-31": Floor(6 / 12, false_drains=1),
    "validation-frameworks-32": Floor(11 / 12, false_drains=1),
    "validation-frameworks-33": Floor(9 / 12),
    "validation-frameworks-34": Floor(10 / 15),
    "validation-frameworks-35": Floor(8 / 13),
    "validation-frameworks-36": Floor(11 / 13),
    "validation-frameworks-37": Floor(7 / 12),
}
"""Sets scored untouched: their misses are documented, not tuned away; validation-4's to
validation-8's floors are their untouched scores (22 of 32 classes with one false drain; 27 of 32,
29 of 32, 28 of 36 and 25 of 30 with none; the per-framework sets of issue 36 likewise: JAX 8 of 15,
TensorFlow 5 of 15, Horovod 8 of 14, other stacks 0 of 11, and the 8 logs mined after issue 36's
first rule changes 2 of 8, the 7 mined after its second 1 of 7, the 5
mined after its last 5 of 5; the generalisation round's tuning set 8 of 13 and its held-out set,
never tuned on, 7 of 13, the 14 mined after that round's rule changes 7 of 14, the 10 mined after its second 4 of 10, and the 7 mined after its third 2 of 7; the mechanism tier's held-out set, 22 logs beyond PyTorch
labelled before scoring, 11 of 22, the fresh round after the tier, 25 logs, 22 of 25, and the next fresh round, 30 logs, 16 of 30
with two false drains (two NCCL setup failures the threads put on the job's software, read as the fabric), and the third fresh round,
26 logs aimed at stacks other than PyTorch, 18 of 26 with none, and the fourth, 20 logs aimed at JAX,
Horovod and node loss, fabric, hang and preemption logs, 13 of 20 with none, and the fifth, 22 logs
mined after the generalisation of those rounds' misses, across frameworks with PyTorch, 17 of 22 with
none, and the sixth, 22 logs mined after the generalisation of the fifth's misses, leaning to JAX,
Horovod, MPI and PyTorch on Slurm, 18 of 22 with none, and the seventh, 21 logs mined after the
generalisation of the sixth's misses, leaning to JAX, TensorFlow, DeepSpeed and storage clients, 13 of
21 with none, and the eighth, 22 logs mined after the proactive families pass, leaning to Horovod,
PaddlePaddle, TensorFlow and JAX, 14 of 22 with none, and the ninth, 15 logs mined after the settled
culprit convention and the launcher fixes, leaning to Ray, DeepSpeed, MPI, OneFlow and Megatron, 12 of
15 with none, and the tenth, 16 logs from forum, HPC-centre and vendor pages as well as GitHub threads,
leaning to JAX/XLA, Horovod, DeepSpeed and Slurm/MPI, 14 of 16 with none, the eleventh, 12 logs
leaning to TensorFlow and TPUs, 6 of 12 with none, and the twelfth, 12 logs leaning to PaddlePaddle's
parameter-server and MPI-cluster training and Ray-hosted trainers, 7 of 12 with none, and the
thirteenth, 11 logs from pull requests and issue threads leaning to JAX on TPUs, DeepSpeed, ROCm and
Megatron checkpoint saves, 10 of 11 with none, and the fourteenth, 12 logs leaning to MXNet's
parameter-server kvstore, OneFlow, TensorFlow's TPUStrategy, JAX/XLA on GPU, ColossalAI and Lightning
on Slurm, 4 of 12 with none, and the fifteenth, 12 logs from pull requests and issue threads on
failures around checkpoint saves (shared and distributed file systems, full disks,
checkpoint-directory races) and DeepSpeed's pdsh launcher, 8 of 12 with none, and the sixteenth, 15
logs leaning to JAX/XLA on GPUs and TPUs (T5X, MaxText, jax3d) and TensorFlow/Keras
(MultiWorkerMirroredStrategy, MirroredStrategy, TPUStrategy, Cloud TPU, Horovod on SageMaker), 10 of 15
with none, and the seventeenth, 15
logs on stacks other than PyTorch, JAX and TensorFlow (Colossal-AI, Horovod and Open MPI launchers,
PaddlePaddle, Megatron, ROCm, an S3 checkpoint save), 8 of 15 with none, and the eighteenth, 12
logs leaning to JAX/XLA (ttt-lm-jax, Scenic), TensorFlow (Mesh TensorFlow's T5, Tensor2Tensor, the
parameter-server runtime, MirroredStrategy, TPUEstimator) and PyTorch/XLA on TPUs, with failure classes
other than application errors, 8 of 12 with none, and the nineteenth, 12
logs leaning to Spark/YARN and Ray Tune memory limits, DeepSpeed's configuration, checkpoint loads and
launcher, NCCL's shared memory and transports, and storage failures during checkpoint saves, 3 of 12
with none, and the twentieth, 12 multi-rank and multi-node logs aimed at culprits (rank prefixes, srun -l
labels, xmp.spawn's process index, NCCL's flight-recorder summary), 9 of 12 with none, and the
twenty-first, 12 logs from training run by Kubernetes operators and cloud services
(Kubeflow TFJob, KubeFATE on AKS, Ray on spot instances and SkyPilot, SageMaker, Vertex AI, Azure ML, EC2
and Kubernetes with EFA or sockets), 6 of 12 with one false drain (an EFA memory registration the
thread puts on the Libfabric/NCCL versions, read as the fabric), and the twenty-second, 12 logs of
infrastructure faults (ECC, a GPU lost to NVML, NET/IB and RoCE errors, dead nodes), 11 of 12 with one
false drain (an NCCL 2.5.6 regression read as the fabric), and the twenty-third, 12 storage and checkpoint
failures, 9 of 12 with none, and the twenty-fourth, 15 logs on accelerators beyond NVIDIA's (Gaudi,
Trainium, ROCm, Intel XPU, Ascend), 10 of 15 with none, and the twenty-fifth, 13 hangs, stalls and
timeouts, 8 of 13 with none, and the twenty-seventh, 12 multi-rank logs whose launcher names the
culprit rank or host (Open MPI's mpirun and errhandler banner, srun -l labels, Cray PALS/MPICH, torchrun's
[rankN]), 7 of 12 with none - validation-7's one
untouched false drain, a peer on the reporting host read as a lost node, is fixed and may not come back)."""
ENGINE = load_engine()
CASES = find_cases(CORPUS)
IN_SAMPLE = [case for case in CASES if case.parent.name not in HELD_OUT]
RELIABLE = [
    case
    for case in IN_SAMPLE
    if json.loads((case / "expected.json").read_text())["difficulty"] in {"easy", "medium"}
]


def test_corpus_is_whole() -> None:
    assert len([c for c in CASES if c.name.startswith("case-")]) >= 19
    assert len([c for c in CASES if c.parent.name == "dev"]) >= 60
    assert len([c for c in CASES if c.parent.name == "validation"]) >= 10
    assert len([c for c in CASES if c.parent.name == "validation-4"]) >= 30
    assert len([c for c in CASES if c.parent.name == "validation-5"]) >= 30
    assert len([c for c in CASES if c.parent.name == "validation-6"]) >= 30
    assert len([c for c in CASES if c.parent.name == "validation-7"]) >= 30
    assert len([c for c in CASES if c.parent.name == "validation-8"]) >= 30
    for framework_set in ("validation-jax", "validation-tf", "validation-horovod"):
        assert len([c for c in CASES if c.parent.name == framework_set]) >= 14
    assert len([c for c in CASES if c.parent.name == "validation-other"]) >= 10
    assert len([c for c in CASES if c.parent.name == "validation-frameworks-2"]) >= 8
    assert len([c for c in CASES if c.parent.name == "validation-frameworks-3"]) >= 7
    assert len([c for c in CASES if c.parent.name == "validation-frameworks-4"]) >= 5
    for round_set in (
        "validation-frameworks-5",
        "validation-frameworks-6",
        "validation-frameworks-7",
    ):
        assert len([c for c in CASES if c.parent.name == round_set]) >= 13
    assert len([c for c in CASES if c.parent.name == "validation-frameworks-8"]) >= 10
    assert len([c for c in CASES if c.parent.name == "validation-frameworks-9"]) >= 7
    assert len([c for c in CASES if c.parent.name == "validation-frameworks-10"]) >= 20
    assert len([c for c in CASES if c.parent.name == "validation-frameworks-11"]) >= 24
    assert len([c for c in CASES if c.parent.name == "validation-frameworks-12"]) >= 30
    assert len([c for c in CASES if c.parent.name == "validation-frameworks-13"]) >= 26
    assert len([c for c in CASES if c.parent.name == "validation-frameworks-14"]) >= 20
    assert len([c for c in CASES if c.parent.name == "validation-frameworks-15"]) >= 22
    assert len([c for c in CASES if c.parent.name == "validation-frameworks-16"]) >= 22
    assert len([c for c in CASES if c.parent.name == "validation-frameworks-17"]) >= 21
    assert len([c for c in CASES if c.parent.name == "validation-frameworks-18"]) >= 22
    assert len([c for c in CASES if c.parent.name == "validation-frameworks-19"]) >= 15
    assert len([c for c in CASES if c.parent.name == "validation-frameworks-20"]) >= 16
    assert len([c for c in CASES if c.parent.name == "validation-frameworks-21"]) >= 12
    assert len([c for c in CASES if c.parent.name == "validation-frameworks-22"]) >= 12
    assert len([c for c in CASES if c.parent.name == "validation-frameworks-23"]) >= 11
    assert len([c for c in CASES if c.parent.name == "validation-frameworks-24"]) >= 12
    assert len([c for c in CASES if c.parent.name == "validation-frameworks-25"]) >= 12
    assert len([c for c in CASES if c.parent.name == "validation-frameworks-26"]) >= 15
    assert len([c for c in CASES if c.parent.name == "validation-frameworks-27"]) >= 15
    assert len([c for c in CASES if c.parent.name == "validation-frameworks-28"]) >= 12
    assert len([c for c in CASES if c.parent.name == "validation-frameworks-29"]) >= 12
    assert len([c for c in CASES if c.parent.name == "validation-frameworks-30"]) >= 12
    assert len([c for c in CASES if c.parent.name == "validation-frameworks-31"]) >= 12
    assert len([c for c in CASES if c.parent.name == "validation-frameworks-32"]) >= 12
    assert len([c for c in CASES if c.parent.name == "validation-frameworks-33"]) >= 12
    assert len([c for c in CASES if c.parent.name == "validation-frameworks-34"]) >= 15
    assert len([c for c in CASES if c.parent.name == "validation-frameworks-35"]) >= 13
    assert len([c for c in CASES if c.parent.name == "validation-frameworks-36"]) >= 13
    assert len([c for c in CASES if c.parent.name == "validation-frameworks-37"]) >= 12
    for case in CASES:
        expected = json.loads((case / "expected.json").read_text())
        assert expected["source"].startswith("https://"), case
        assert list(case.glob("*.log")), case


def _report_text(cases: list[Path]) -> tuple[float, list[object], str]:
    report = evaluate(cases, ENGINE)
    text = (
        f"{report.correct}/{report.total} = {report.accuracy:.1%}; culprits exact on "
        f"{report.culprits_exact}\n{confusion_markdown(report.results)}\n"
        f"{misses_markdown(report)}"
    )
    print("\n" + text)
    return report.accuracy, list(report.false_drains), text


def test_accuracy_floor_and_no_false_drains() -> None:
    accuracy, false_drains, text = _report_text(IN_SAMPLE)
    assert accuracy >= MIN_ACCURACY, text
    assert false_drains == [], text


@pytest.mark.parametrize("held_out", sorted(HELD_OUT))
def test_held_out_sets_keep_their_floor_and_never_drain(held_out: str) -> None:
    cases = [case for case in CASES if case.parent.name == held_out]
    assert len(cases) >= 5
    accuracy, false_drains, text = _report_text(cases)
    floor = HELD_OUT[held_out]
    assert accuracy >= floor.accuracy, text
    assert len(false_drains) <= floor.false_drains, text


@pytest.mark.parametrize("case", RELIABLE, ids=lambda p: p.name)
def test_reliable_case(case: Path) -> None:
    result = evaluate_case(case, ENGINE)
    assert result.diagnosed is result.expected, result.summary
