"""What each framework's checkpoint folder must hold, on top of the generic checks.

The generic checks (resurrect.checkpoint.verify_one) judge every file a folder has: zip
structure of torch.save files, safetensors headers, DCP metadata and shard sizes. Here,
what a folder must have for its framework to load it:

* DeepSpeed ``global_stepN/``: a ``*model_states.pt``; the ZeRO files of every
  data-parallel rank from 0 up (``zero_pp_rank_R_mp_rank_M_optim_states.pt``), per
  model-parallel rank, with no gap.
* Megatron ``iter_N/``: ``metadata.json`` readable (a JSON object); with
  ``sharded_backend`` ``torch_dist``, ``common.pt`` and DCP's ``.metadata``; a legacy
  ``mp_rank_XX/`` folder holds ``model_optim_rng.pt``.
* Hugging Face Trainer ``checkpoint-N/``: in a root where Trainer saved (some folder has
  ``trainer_state.json``), ``trainer_state.json`` (written last by Trainer: without it
  the save did not finish) with its ``global_step``, and model weights; everywhere,
  every shard a ``*.index.json`` names.
* torchtitan ``step-N/``: a DCP folder; the generic checks already call one without
  ``.metadata`` unfinished (torchtitan itself skips a step without it).

A folder is judged by its contents, not its name: one holding DCP's ``.metadata`` (which
the generic checks judged) is a DCP checkpoint whatever it is called. When its contents fit
both DCP and the framework's layout, it is intact if it is intact under either, and the
reason says under which; only a layout built on DCP (Megatron's torch_dist) keeps its own
requirements on top.

Only names, sizes and small JSON files (capped) are read; nothing is unpickled.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable
from dataclasses import replace

from resurrect.checkpoint import dcp
from resurrect.checkpoint.findings import Findings
from resurrect.checkpoint.frameworks import HF_TRAINER_STATE
from resurrect.checkpoint.fsutil import describe_oserror, list_files, read_capped
from resurrect.checkpoint.layout import Layout
from resurrect.checkpoint.verify_one import Plan

#: Megatron's metadata.json is a few lines; Trainer's state grows with its log history.
MAX_MEGATRON_METADATA_BYTES = 64 << 10
MAX_TRAINER_STATE_BYTES = 32 << 20
MAX_WEIGHT_INDEX_BYTES = 32 << 20

_DS_ZERO = re.compile(
    r"^(?:bf16_)?zero_pp_rank_(?P<dp>[0-9]+)_mp_rank_(?P<mp>[0-9]+)_(?P<what>optim|model)_states\.pt$"
)
_DS_MP_MODEL = re.compile(r"^mp_rank_(?P<mp>[0-9]+)_model_states\.pt$")
_MEGATRON_RANK_DIR = re.compile(r"^mp_rank_[0-9]+(?:_[0-9]+)?$")
HF_WEIGHTS = (
    "model.safetensors",
    "pytorch_model.bin",
    "adapter_model.safetensors",
    "adapter_model.bin",
)
HF_WEIGHT_INDEXES = ("model.safetensors.index.json", "pytorch_model.bin.index.json")


def check_frameworks(layout: Layout, plans: list[Plan]) -> None:
    """Add the framework's own requirements to each plan's findings (folders only).

    A check that fails unexpectedly is recorded as damage, never raised."""
    check = _CHECKS.get(layout.framework)
    if check is None:
        return
    folders = [p for p in plans if p.candidate.kind == "dir" and not p.candidate.partial_name]
    listed = [(plan, _files_of(plan)) for plan in folders if plan.findings.valid]
    if layout.framework == "hf_trainer" and not any(HF_TRAINER_STATE in f for _p, f in listed):
        check = _check_hf_weights_only  # folders of weights only: not Trainer's own saves
    for plan, files in listed:
        trial = replace(plan, findings=Findings())
        try:
            check(trial, files)
        except Exception as exc:
            trial.findings.damage(f"{layout.framework} check failed ({type(exc).__name__}: {exc})")
        if trial.findings.problems and dcp.METADATA_NAME in files and not _builds_on_dcp(files):
            # the generic checks found it an intact DCP checkpoint: that layout fits
            plan.findings.note(
                f"intact as PyTorch DCP (its .metadata); not as {layout.framework}:"
                f" {trial.findings.problems[0]}"
            )
            continue
        _merge(plan.findings, trial.findings)


def _builds_on_dcp(files: dict[str, int]) -> bool:
    """Whether the folder is a layout that holds a DCP checkpoint and more (Megatron's
    torch_dist: its ``metadata.json`` and ``common.pt`` beside DCP's files), whose
    requirements stand even though its DCP part is intact."""
    return "metadata.json" in files or "common.pt" in files


def _merge(into: Findings, found: Findings) -> None:
    """Add what one framework check found to a checkpoint's findings."""
    into.problems.extend(found.problems)
    into.in_progress = into.in_progress or found.in_progress
    for what in found.checked:
        into.note(what)
    for detail in found.limited:
        into.limit(detail)
    for detail in found.unjudged:
        into.cannot_judge(detail)


def _files_of(plan: Plan) -> dict[str, int]:
    """Every regular file of the checkpoint folder, by its path inside it -> size."""
    return {f.rel: f.size for f in list_files(plan.candidate.path).files}


def _check_deepspeed(plan: Plan, files: dict[str, int]) -> None:
    if not plan.candidate.name.startswith("global_step"):
        return
    findings = plan.findings
    if not any(name.endswith("model_states.pt") for name in files):
        findings.damage("no *model_states.pt (DeepSpeed saves mp_rank_XX_model_states.pt)")
        return
    mp_ranks = {int(m["mp"]) for n in files if (m := _DS_MP_MODEL.match(n))}
    _contiguous(plan, mp_ranks, lambda r: f"mp_rank_{r:02d}_model_states.pt")
    zero: dict[tuple[str, int], set[int]] = {}
    for name in files:
        match = _DS_ZERO.match(name)
        if match:
            zero.setdefault((match["what"], int(match["mp"])), set()).add(int(match["dp"]))
    for (what, mp), dp_ranks in sorted(zero.items()):
        _contiguous(plan, dp_ranks, _zero_name(what, mp))
    ranks = max((len(r) for r in zero.values()), default=1)
    findings.note(f"DeepSpeed model and ZeRO files of {ranks} rank(s)")


def _zero_name(what: str, mp: int) -> Callable[[int], str]:
    """The name DeepSpeed gives a ZeRO file of data-parallel rank r at model-parallel mp."""
    return lambda dp: f"zero_pp_rank_{dp}_mp_rank_{mp:02d}_{what}_states.pt"


def _contiguous(plan: Plan, ranks: set[int], name_of: Callable[[int], str]) -> None:
    """Damage for every rank missing below the highest one present."""
    missing = sorted(set(range(max(ranks, default=-1) + 1)) - ranks)
    if missing:
        shown = ", ".join(name_of(r) for r in missing[:3])
        more = " ..." if len(missing) > 3 else ""
        plan.findings.damage(f"missing rank file(s) {shown}{more} (ranks 0-{max(ranks)} expected)")


def _check_megatron(plan: Plan, files: dict[str, int]) -> None:
    if plan.candidate.name.startswith("global_step"):  # Megatron-DeepSpeed
        _check_deepspeed(plan, files)
        return
    findings = plan.findings
    rank_dirs = {rel.split("/", 1)[0] for rel in files if "/" in rel}
    for rank_dir in sorted(d for d in rank_dirs if _MEGATRON_RANK_DIR.match(d)):
        if not any(rel.startswith(f"{rank_dir}/") and rel.endswith(".pt") for rel in files):
            findings.damage(f"{rank_dir}/ has no model_optim_rng.pt")
    if "metadata.json" not in files:
        return
    try:
        raw = read_capped(plan.candidate.path / "metadata.json", MAX_MEGATRON_METADATA_BYTES)
        doc = json.loads(raw)
    except OSError as exc:
        findings.damage(f"metadata.json unreadable ({describe_oserror(exc)})")
        return
    except (ValueError, RecursionError):
        findings.damage("metadata.json garbled (not JSON)")
        return
    backend = doc.get("sharded_backend") if isinstance(doc, dict) else None
    if not isinstance(backend, str):
        findings.damage("metadata.json garbled (no sharded_backend)")
        return
    if backend == "torch_dist":
        if "common.pt" not in files:
            findings.damage("missing common.pt (Megatron torch_dist writes it with every save)")
        if dcp.METADATA_NAME not in files:
            findings.damage("torch_dist checkpoint without DCP .metadata")
        findings.note("Megatron torch_dist metadata.json and common.pt")
    else:
        findings.note(f"Megatron {backend[:40]} (its shards checked by size and type only)")


def _json_file(plan: Plan, name: str, cap: int) -> object | None:
    """The JSON document ``name`` of the candidate (at most ``cap`` bytes, no symlink); None,
    with a damage finding, when it cannot be read or is not JSON."""
    try:
        document: object = json.loads(read_capped(plan.candidate.path / name, cap))
        return document
    except OSError as exc:
        plan.findings.damage(f"{name} unreadable ({describe_oserror(exc)})")
    except (ValueError, RecursionError):
        plan.findings.damage(f"{name} garbled (not JSON)")
    return None


def _check_hf_trainer(plan: Plan, files: dict[str, int]) -> None:
    if not plan.candidate.name.startswith("checkpoint-"):
        return
    findings = plan.findings
    if HF_TRAINER_STATE not in files:
        findings.saving(f"no {HF_TRAINER_STATE} (Trainer writes it last)")
        return
    state = _json_file(plan, HF_TRAINER_STATE, MAX_TRAINER_STATE_BYTES)
    if state is None:
        return
    if not isinstance(state, dict) or not isinstance(state.get("global_step"), int):
        findings.damage(f"{HF_TRAINER_STATE} garbled (no global_step)")
        return
    indexes = [name for name in HF_WEIGHT_INDEXES if name in files]
    has_fsdp = any(rel.startswith("pytorch_model_fsdp") for rel in files)
    if not indexes and not has_fsdp and not any(name in files for name in HF_WEIGHTS):
        findings.damage("no model weights (model.safetensors, pytorch_model.bin or an index)")
    _check_hf_weights_only(plan, files)
    findings.note(f"Trainer {HF_TRAINER_STATE} and weights")


def _check_hf_weights_only(plan: Plan, files: dict[str, int]) -> None:
    """Every shard a weight index names is there."""
    for index in HF_WEIGHT_INDEXES:
        if index in files:
            _check_weight_index(plan, files, index)


def _check_weight_index(plan: Plan, files: dict[str, int], index: str) -> None:
    findings = plan.findings
    doc = _json_file(plan, index, MAX_WEIGHT_INDEX_BYTES)
    if doc is None:
        return
    weight_map = doc.get("weight_map") if isinstance(doc, dict) else None
    if not isinstance(weight_map, dict):
        findings.damage(f"{index} garbled (no weight_map)")
        return
    for shard in sorted({str(v) for v in weight_map.values()}):
        if shard not in files:
            findings.damage(f"{shard} named by {index} is {plan.missing(shard)}")


_CHECKS: dict[str, Callable[[Plan, dict[str, int]], None]] = {
    "deepspeed": _check_deepspeed,
    "megatron": _check_megatron,
    "hf_trainer": _check_hf_trainer,
    "torchtitan": _check_hf_weights_only,  # its last step may be saved in HF format
}
