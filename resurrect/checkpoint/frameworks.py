"""Which training framework wrote a checkpoint root, judged from the root's own entries.

The framework decides how the job picks what to load when it starts again, so how
resurrect makes it resume from the newest intact checkpoint
(resurrect.checkpoint.pointers):

========================  ===================================  ===========================
framework                 what it loads                        what resurrect rewrites
========================  ===================================  ===========================
``megatron``              ``latest_checkpointed_iteration.txt``  the tracker
``deepspeed``             the tag in ``latest``                ``latest``
``hf_trainer``            the highest ``checkpoint-N``          nothing: quarantine
``torchtitan``            the highest ``step-N`` with .metadata  nothing: quarantine
``lightning``             ``last.ckpt`` (``ckpt_path="last"``)   ``last.ckpt``
``generic``               the resume hint / ``resume_path``     nothing: quarantine
========================  ===================================  ===========================

Only names and entry types are looked at here (one listing, nothing opened).
"""

from __future__ import annotations

import re
import stat
from collections.abc import Iterable
from typing import Literal

Framework = Literal["megatron", "deepspeed", "hf_trainer", "torchtitan", "lightning", "generic"]

MEGATRON_TRACKER = "latest_checkpointed_iteration.txt"
DEEPSPEED_LATEST = "latest"
LIGHTNING_SUFFIX = ".ckpt"
LIGHTNING_LAST = "last.ckpt"
#: Trainer writes it last into ``checkpoint-N/``: with it, the save ended.
HF_TRAINER_STATE = "trainer_state.json"

_MEGATRON_DIR = re.compile(r"^iter_[0-9]+$")
_DEEPSPEED_DIR = re.compile(r"^global_step[0-9]+$")
#: transformers' own test for a checkpoint folder (trainer_utils.get_last_checkpoint).
_HF_DIR = re.compile(r"^checkpoint-[0-9]+$")
_TORCHTITAN_DIR = re.compile(r"^step-[0-9]+$")
#: What ModelCheckpoint._find_last_checkpoints takes for a "last" file: a ``.ckpt`` whose
#: name starts with ``last`` (``last.ckpt``, versioned ``last-v1.ckpt``).
_LIGHTNING_LAST = re.compile(r"^last.*\.ckpt$")
_LIGHTNING_STEP = re.compile(r"(?:^|[-_])step=([0-9]+)")
_LIGHTNING_EPOCH = re.compile(r"(?:^|[-_])epoch=([0-9]+)")


def detect(entries: Iterable[tuple[str, int]]) -> Framework:
    """The framework of a root from its ``(name, st_mode)`` entries (first match wins:
    a tracker or a regular ``latest`` file names the framework even before its first
    folder; a ``latest`` symlink many scripts keep to their newest ``step_N`` does not)."""
    names: dict[str, int] = dict(entries)
    dirs = [n for n, mode in names.items() if stat.S_ISDIR(mode)]
    if MEGATRON_TRACKER in names or any(_MEGATRON_DIR.match(n) for n in dirs):
        return "megatron"
    if any(_DEEPSPEED_DIR.match(n) for n in dirs) or (
        DEEPSPEED_LATEST in names and stat.S_ISREG(names[DEEPSPEED_LATEST])
    ):
        return "deepspeed"
    if any(_HF_DIR.match(n) for n in dirs):
        return "hf_trainer"
    if any(_TORCHTITAN_DIR.match(n) for n in dirs):
        return "torchtitan"
    if any(n.endswith(LIGHTNING_SUFFIX) for n in names):
        return "lightning"
    return "generic"


def is_lightning_last(name: str) -> bool:
    """True for a name Lightning's ``ckpt_path="last"`` considers (``last*.ckpt``)."""
    return _LIGHTNING_LAST.match(name) is not None


def lightning_order(name: str) -> tuple[int, int] | None:
    """``(step, epoch)`` read from a Lightning file name such as ``epoch=3-step=400.ckpt``
    (-1 where a part is absent); None when the name has neither."""
    step = _LIGHTNING_STEP.search(name)
    epoch = _LIGHTNING_EPOCH.search(name)
    if step is None and epoch is None:
        return None
    return (int(step[1]) if step else -1, int(epoch[1]) if epoch else -1)


def pointer_family(framework: Framework, child_dirs: Iterable[str]) -> str | None:
    """The name prefix of the checkpoints a pointer file of ``framework`` counts in.

    Megatron's tracker counts ``iter_N`` folders, or ``global_stepN`` ones in a
    Megatron-DeepSpeed root (which has no ``iter_N``); DeepSpeed's ``latest`` counts
    ``global_stepN``."""
    if framework == "deepspeed":
        return "global_step"
    if framework == "megatron":
        listed = list(child_dirs)
        if not any(_MEGATRON_DIR.match(n) for n in listed) and any(
            _DEEPSPEED_DIR.match(n) for n in listed
        ):
            return "global_step"
        return "iter"
    return None
