"""The checkpoint layouts of the frameworks jobs train with, saved by the real libraries.

Each fixture under tests/fixtures/checkpoints/frameworks/ is a root with three
checkpoints written by the framework itself (deploy/maintenance/make-framework-fixtures.py,
PROVENANCE.json in each). For each: the framework is recognised, the newest intact
checkpoint is chosen, and when the newest is damaged the job's own loader is made to
resume from the previous one (its pointer rewritten, or the damaged one moved aside where
the framework has no pointer), with nothing deleted. The loaders are emulated by the
rules each framework documents (``what_the_framework_loads``), without the libraries.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import pytest

from checkpoint.factory import contents, make_dcp, make_torch_save, tree_snapshot, truncate
from resurrect.checkpoint import prepare_resume, resume_path, verify_root
from resurrect.checkpoint.fsutil import anchored
from resurrect.checkpoint.layout import QUARANTINE_DIR, discover

pytestmark = pytest.mark.torch  # the damage helpers come with the torch factory

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "checkpoints" / "frameworks"
#: The fixtures' checkpoints were saved this long before the crash resurrect recovers from.
SAVED_AGO_S = 3600.0


@dataclass(frozen=True)
class Layout:
    """One fixture: its framework, its checkpoints oldest first, the file of a checkpoint
    the framework cannot load without, and what a crash in the newest save tears."""

    fixture: str
    framework: str
    checkpoints: tuple[str, ...]
    key_file: str  # relative to a checkpoint folder; "" for a single-file checkpoint
    torn: tuple[str, ...] = ()  # default: the newest checkpoint

    @property
    def newest(self) -> str:
        return self.checkpoints[-1]

    @property
    def torn_by_a_crash(self) -> tuple[str, ...]:
        return self.torn or (self.newest,)

    @property
    def previous(self) -> str:
        """The newest checkpoint a crash in the last save leaves intact."""
        return [c for c in self.checkpoints if c not in self.torn_by_a_crash][-1]


_LIGHTNING = ("epoch=0-step=1.ckpt", "epoch=0-step=2.ckpt", "epoch=0-step=3.ckpt")
LAYOUTS = [
    Layout(
        "deepspeed",
        "deepspeed",
        ("global_step1", "global_step2", "global_step3"),
        "mp_rank_00_model_states.pt",
    ),
    Layout(
        "megatron_torch_dist",
        "megatron",
        ("iter_0000001", "iter_0000002", "iter_0000003"),
        "common.pt",
    ),
    Layout(
        "hf_trainer",
        "hf_trainer",
        ("checkpoint-1", "checkpoint-2", "checkpoint-3"),
        "model.safetensors",
    ),
    Layout(
        "torchtitan",
        "torchtitan",
        ("step-1", "step-2", "step-3"),
        "__0_0.distcp",
    ),
    Layout("lightning_link", "lightning", _LIGHTNING, ""),
    # save_last=True: the save of step 3 wrote epoch=0-step=3.ckpt and the copy last.ckpt.
    Layout(
        "lightning_copy",
        "lightning",
        (*_LIGHTNING, "last.ckpt"),
        "",
        torn=(*_LIGHTNING[2:], "last.ckpt"),
    ),
]


def cases(layouts: list[Layout]) -> list[object]:
    """``layouts`` as pytest params, named after their fixtures."""
    return [pytest.param(lay, id=lay.fixture) for lay in layouts]


_QUARANTINE_STAMP = re.compile(r"-\d{8}T\d{6}Z(?:\.\d+)?$")


def copy_fixture(layout: Layout, parent: Path) -> Path:
    """A private copy of the fixture, its files saved an hour ago (as a job's would be)."""
    root = parent / layout.fixture
    shutil.copytree(FIXTURES / layout.fixture, root, symlinks=True)
    return saved_long_ago(root)


def saved_long_ago(root: Path) -> Path:
    """Date everything under ``root`` SAVED_AGO_S back (no save can still be running)."""
    old = time.time() - SAVED_AGO_S
    for dirpath, dirs, files in os.walk(root):
        for name in dirs + files:
            os.utime(Path(dirpath) / name, (old, old), follow_symlinks=False)
    return root


def what_the_framework_loads(layout: Layout, root: Path) -> Path | None:
    """The checkpoint the framework's own resume logic would load from ``root``."""
    if layout.framework == "deepspeed":  # engine.load_checkpoint(root): the tag in `latest`
        return root / (root / "latest").read_text().strip()
    if layout.framework == "megatron":  # checkpointing.load_checkpoint: the tracker
        return root / f"iter_{int((root / 'latest_checkpointed_iteration.txt').read_text()):07d}"
    if layout.framework == "hf_trainer":  # trainer_utils.get_last_checkpoint
        found = [
            (int(m[1]), root / n)
            for n in os.listdir(root)
            if (m := re.search(r"^checkpoint\-(\d+)$", n)) and (root / n).is_dir()
        ]
        return max(found)[1] if found else None
    if layout.framework == "torchtitan":  # CheckpointManager._find_load_step
        steps = [
            (int(m[1]), root / n)
            for n in os.listdir(root)
            if (m := re.search(r"step-(\d+)", n)) and (root / n / ".metadata").is_file()
        ]
        return max(steps)[1] if steps else None
    # Lightning, fit(ckpt_path="last"): ModelCheckpoint._find_last_checkpoints, newest mtime
    lasts = [
        root / n
        for n in os.listdir(root)
        if n.endswith(".ckpt") and re.match(r"^last(-(\d+))?", n[: -len(".ckpt")])
    ]
    existing = [p for p in lasts if p.exists()]
    if not existing:
        return None
    chosen = max(existing, key=os.path.getmtime)
    return root / os.readlink(chosen) if chosen.is_symlink() else chosen


def _damaged_file(layout: Layout, ckpt: Path) -> Path:
    return ckpt / layout.key_file if layout.key_file else ckpt


def _truncate(path: Path) -> None:
    truncate(path, 0.5)


def _zero(path: Path) -> None:
    path.write_bytes(b"")


def _remove(path: Path) -> None:
    path.unlink()


DAMAGE: dict[str, Callable[[Path], None]] = {
    "truncated": _truncate,
    "zero-byte": _zero,
    "removed": _remove,
}


# --------------------------------------------------------------------------- intact sets
@pytest.mark.parametrize("layout", cases(LAYOUTS))
def test_the_framework_is_recognised_and_its_newest_checkpoint_chosen(
    tmp_path: Path, layout: Layout
) -> None:
    root = copy_fixture(layout, tmp_path)
    with anchored(root):
        assert discover(root).framework == layout.framework
    for level in ("quick", "full"):
        verdict = verify_root(root, level)  # type: ignore[arg-type]
        assert verdict.verified, verdict.note
        assert all(c.valid for c in verdict.candidates), verdict.candidates
        assert verdict.latest_valid == str(root / layout.newest), verdict
    before = tree_snapshot(root)
    verdict = prepare_resume(root, level="full")
    assert verdict.quarantined == []
    assert what_the_framework_loads(layout, root) == _loaded_when_intact(layout, root)
    assert {k: v for k, v in tree_snapshot(root).items() if "resurrect" not in k} == before


def _loaded_when_intact(layout: Layout, root: Path) -> Path:
    if layout.fixture == "lightning_copy":
        return root / "last.ckpt"  # a real file: Lightning loads the copy itself
    return root / layout.newest


# ------------------------------------------------------------------- damaged newest
@pytest.mark.parametrize("damage", sorted(DAMAGE))
@pytest.mark.parametrize("layout", cases(LAYOUTS))
def test_a_damaged_newest_checkpoint_makes_the_job_load_the_previous_one(
    tmp_path: Path, layout: Layout, damage: str
) -> None:
    root = copy_fixture(layout, tmp_path)
    torn = [root / name for name in layout.torn_by_a_crash]
    for ckpt in torn:
        DAMAGE[damage](_damaged_file(layout, ckpt))
    previous = root / layout.previous
    before = contents(tree_snapshot(root))
    left = [c for c in torn if c.exists()]  # what a removed single-file checkpoint leaves

    verdict = prepare_resume(root)

    assert verdict.latest_valid == str(previous), verdict
    assert what_the_framework_loads(layout, root) == previous, verdict.note
    assert resume_path(root) == previous
    moved = [Path(q) for q in verdict.quarantined]
    assert all(p.parent == root / QUARANTINE_DIR and p.exists() for p in moved), moved
    assert sorted(_QUARANTINE_STAMP.sub("", p.name) for p in moved) == sorted(c.name for c in left)
    assert not any(c.exists() and not c.is_symlink() for c in torn)
    after = contents(tree_snapshot(root))
    assert all(blob in after for blob in before), "a byte of the job's data was lost"


# ------------------------------------------------------------------- mixed and look-alike
def test_megatron_deepspeed_root_gets_both_pointers_rewritten(tmp_path: Path) -> None:
    """Megatron-DeepSpeed saves DeepSpeed's global_stepN/ and `latest`, and also
    Megatron's tracker with the iteration number: both must name the intact one."""
    layout = next(lay for lay in LAYOUTS if lay.fixture == "deepspeed")
    root = copy_fixture(layout, tmp_path)
    (root / "latest_checkpointed_iteration.txt").write_text("3")
    truncate(root / "global_step3" / layout.key_file, 0.5)
    verdict = prepare_resume(root)
    with anchored(root):
        assert discover(root).framework == "megatron"
    assert verdict.latest_valid == str(root / "global_step2")
    assert (root / "latest").read_text() == "global_step2"
    assert (root / "latest_checkpointed_iteration.txt").read_text() == "2\n"


def test_a_latest_symlink_to_the_newest_step_is_not_deepspeed(tmp_path: Path) -> None:
    layout = next(lay for lay in LAYOUTS if lay.fixture == "deepspeed")
    root = copy_fixture(layout, tmp_path)
    for step in (1, 2, 3):
        (root / f"global_step{step}").rename(root / f"step_{step}")
    (root / "latest").unlink()
    os.symlink("step_3", root / "latest")
    with anchored(root):
        assert discover(root).framework == "generic"
    verdict = verify_root(root)
    assert verdict.latest_valid == str(root / "step_3") and "latest" not in verdict.note


# ------------------------------------------------------- what each framework's folder needs
def _by_name(verdict_candidates: list[object], name: str) -> tuple[bool, str]:
    cand = next(c for c in verdict_candidates if Path(c.path).name == name)  # type: ignore[attr-defined]
    return cand.valid, cand.reason  # type: ignore[attr-defined]


def test_deepspeed_folder_missing_a_zero_rank_file_is_damaged(tmp_path: Path) -> None:
    layout = next(lay for lay in LAYOUTS if lay.fixture == "deepspeed")
    root = copy_fixture(layout, tmp_path)
    (root / "global_step3" / "zero_pp_rank_0_mp_rank_00_optim_states.pt").unlink()
    verdict = prepare_resume(root)
    valid, reason = _by_name(verdict.candidates, "global_step3")
    assert not valid and "missing rank file(s) zero_pp_rank_0_mp_rank_00_optim_states.pt" in reason
    assert (root / "latest").read_text() == "global_step2"


def test_deepspeed_latest_naming_a_custom_tag_is_left_as_it_is(tmp_path: Path) -> None:
    layout = next(lay for lay in LAYOUTS if lay.fixture == "deepspeed")
    root = copy_fixture(layout, tmp_path)
    (root / "latest").write_text("best")
    truncate(root / "global_step3" / layout.key_file, 0.5)
    verdict = prepare_resume(root)
    assert "latest names 'best', not a global_stepN folder: left as it is" in verdict.note
    assert (root / "latest").read_text() == "best"
    assert verdict.latest_valid == str(root / "global_step2")


@pytest.mark.parametrize(
    ("change", "expected"),
    [
        ("no trainer_state.json", "save in progress: no trainer_state.json"),
        ("garbled trainer_state.json", "trainer_state.json garbled (not JSON)"),
        ("no global_step", "trainer_state.json garbled (no global_step)"),
        ("no weights", "no model weights"),
        ("index names a missing shard", "model-00002-of-00002.safetensors named by"),
    ],
)
def test_trainer_folder_requirements(tmp_path: Path, change: str, expected: str) -> None:
    layout = next(lay for lay in LAYOUTS if lay.fixture == "hf_trainer")
    root = copy_fixture(layout, tmp_path)
    newest = root / layout.newest
    state = newest / "trainer_state.json"
    if change == "no trainer_state.json":
        state.unlink()
    elif change == "garbled trainer_state.json":
        state.write_text("{not json")
    elif change == "no global_step":
        state.write_text('{"epoch": 1}')
    elif change == "no weights":
        (newest / "model.safetensors").unlink()
    else:
        (newest / "model.safetensors").rename(newest / "model-00001-of-00002.safetensors")
        index = {
            "weight_map": {
                "a": "model-00001-of-00002.safetensors",
                "b": "model-00002-of-00002.safetensors",
            }
        }
        (newest / "model.safetensors.index.json").write_text(json.dumps(index))
    verdict = prepare_resume(saved_long_ago(root))
    valid, reason = _by_name(verdict.candidates, layout.newest)
    assert not valid and expected in reason, reason
    assert what_the_framework_loads(layout, root) == root / layout.previous


def test_trainer_folder_whose_save_may_still_run_is_left_and_the_note_says_trainer_may_load_it(
    tmp_path: Path,
) -> None:
    layout = next(lay for lay in LAYOUTS if lay.fixture == "hf_trainer")
    root = copy_fixture(layout, tmp_path)
    (root / layout.newest / "trainer_state.json").unlink()  # Trainer writes it last
    verdict = prepare_resume(root)
    assert verdict.latest_valid == str(root / layout.previous)
    assert (root / layout.newest).is_dir() and verdict.quarantined == []
    assert f"left {layout.newest} in place (save may still be running)" in verdict.note
    assert (
        f"hf_trainer loads the highest step folder and ignores markers, so it may load {layout.newest}"
        in verdict.note
    )


def test_megatron_torch_dist_folder_requirements(tmp_path: Path) -> None:
    """Megatron's files around a real DCP save (made here by torch, as the example job's
    torch writes it): metadata.json must be JSON naming its backend, and a torch_dist save
    has common.pt and DCP's .metadata."""
    root = tmp_path / "megatron"
    for it in (1, 2, 3, 4):
        folder = make_dcp(root / f"iter_{it:07d}", seed=it)
        make_torch_save(folder / "common.pt", seed=it)
        (folder / "metadata.json").write_text(
            json.dumps({"sharded_backend": "torch_dist", "sharded_backend_version": 1})
        )
    (root / "latest_checkpointed_iteration.txt").write_text("4")
    (root / "iter_0000004" / "common.pt").unlink()
    (root / "iter_0000003" / "metadata.json").write_text("[1, 2")
    (root / "iter_0000002" / "metadata.json").write_text('{"sharded_backend": 7}')
    verdict = prepare_resume(root)
    assert "missing common.pt" in _by_name(verdict.candidates, "iter_0000004")[1]
    assert "metadata.json garbled (not JSON)" in _by_name(verdict.candidates, "iter_0000003")[1]
    assert "no sharded_backend" in _by_name(verdict.candidates, "iter_0000002")[1]
    assert verdict.latest_valid == str(root / "iter_0000001")
    assert (root / "latest_checkpointed_iteration.txt").read_text() == "1\n"


def test_lightning_names_order_by_step_then_epoch(tmp_path: Path) -> None:
    layout = next(lay for lay in LAYOUTS if lay.fixture == "lightning_link")
    root = copy_fixture(layout, tmp_path)
    (root / "epoch=0-step=3.ckpt").rename(root / "epoch=1-step=30-val_loss=0.12.ckpt")
    (root / "epoch=0-step=2.ckpt").rename(root / "epoch=0-step=9.ckpt")
    (root / "last.ckpt").unlink()
    os.symlink("epoch=1-step=30-val_loss=0.12.ckpt", root / "last.ckpt")
    verdict = verify_root(root)
    assert [c.step for c in verdict.candidates] == [30, 9, 1]
    assert verdict.latest_valid == str(root / "epoch=1-step=30-val_loss=0.12.ckpt")
