"""Verification of one checkpoint (a directory or a single file).

Structural checks run inline (they read only metadata and headers); the per-file data work
(sha256 against the manifest, zip CRCs, ...) is returned as tasks so the caller can run the
files of large checkpoints in parallel.
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Literal

from resurrect.checkpoint import dcp
from resurrect.checkpoint.findings import Findings
from resurrect.checkpoint.fsutil import (
    FileEntry,
    describe_oserror,
    is_partial_name,
    lexists,
    list_files,
    open_regular,
)
from resurrect.checkpoint.layout import DAMAGE_MARKER_SUFFIX, Candidate
from resurrect.checkpoint.limits import DEFAULT_LIMITS, VerifyLimits
from resurrect.checkpoint.manifest import MANIFEST_NAME, ManifestError, read_manifest, sha256_file
from resurrect.checkpoint.safetensors_check import check_safetensors
from resurrect.checkpoint.zipcheck import ZipDamage, check_archive

Level = Literal["quick", "full"]
TORCH_SUFFIXES = (".pt", ".pth", ".ckpt", ".bin")
#: A manifest-less, metadata-less directory modified this recently is taken as still saving.
DEFAULT_RECENT_S = 120.0

ByteSink = Callable[[int], None]


@dataclass(frozen=True)
class FileTask:
    """Data work on one file: returns a problem or None; reports bytes read to the sink."""

    label: str
    size: int
    run: Callable[[ByteSink], str | None]


@dataclass
class Plan:
    """The inline findings of one checkpoint plus its deferred per-file tasks."""

    candidate: Candidate
    findings: Findings
    tasks: list[FileTask]
    limits: VerifyLimits = DEFAULT_LIMITS
    links: set[str] = field(default_factory=set)  # symlinks in the checkpoint (not followed)

    def missing(self, rel: str) -> str:
        """How to call a file the checkpoint needs but that is not a regular file."""
        return "a symlink (not followed)" if rel in self.links else "missing"

    def add_full_task(self, task: FileTask) -> None:
        """Queue a full-read task, unless the file is over the size cap (then noted)."""
        if task.size > self.limits.max_full_file_bytes:
            self.findings.limit(self.too_large(task.label, task.size))
        else:
            self.tasks.append(task)

    def too_large(self, label: str, size: int) -> str:
        return (
            f"{label} too large to verify fully ({size} > {self.limits.max_full_file_bytes} bytes)"
        )


def plan_checks(
    cand: Candidate,
    level: Level,
    *,
    now: float | None = None,
    recent_s: float = DEFAULT_RECENT_S,
    limits: VerifyLimits = DEFAULT_LIMITS,
) -> Plan:
    """Run the structural checks of ``cand`` and list its data tasks for ``level``."""
    findings = Findings()
    plan = Plan(cand, findings, [], limits)
    marker = cand.path.with_name(cand.name + DAMAGE_MARKER_SUFFIX)
    if cand.kind == "missing":
        findings.damage(cand.detail or "missing")
    elif lexists(marker):
        findings.damage(f"marked damaged by resurrect ({marker.name})")
    elif cand.kind == "unreadable":
        findings.damage(f"unreadable ({cand.detail})")
    elif cand.partial_name:
        findings.saving(f"name {cand.name!r} marks an unfinished save")
    elif cand.kind == "file":
        _plan_single_file(plan, level)
    else:
        _plan_directory(plan, level, time.time() if now is None else now, recent_s)
    return plan


def _plan_single_file(plan: Plan, level: Level) -> None:
    path = plan.candidate.path
    try:
        with open_regular(path) as fh:
            size = os.fstat(fh.fileno()).st_size
    except OSError as exc:
        plan.findings.damage(f"unreadable ({describe_oserror(exc)})")
        return
    entry = FileEntry(path, path.name, size, 0.0)
    if size == 0:
        plan.findings.damage(f"zero-byte file {path.name}")
    elif path.suffix == ".safetensors":
        problem = check_safetensors(path, size)
        if problem:
            plan.findings.damage(problem)
        plan.findings.note("safetensors header")
    else:
        _add_zip_task(plan, entry, full=level == "full")


def _plan_directory(plan: Plan, level: Level, now: float, recent_s: float) -> None:
    cand, findings = plan.candidate, plan.findings
    listing = list_files(cand.path)
    for err in listing.errors:
        findings.damage(err)
    files = {f.rel: f for f in listing.files}
    for f in listing.files:
        if is_partial_name(f.path.name):
            findings.saving(f"unfinished file {f.rel}")
    if not files and not listing.errors:
        findings.damage("empty directory")
        return
    if cand.beyond_tracker:
        findings.saving("iteration newer than latest_checkpointed_iteration.txt")

    plan.links = listing.links
    manifest_files = _plan_manifest(plan, files, level)
    has_metadata = dcp.METADATA_NAME in files or lexists(cand.path / dcp.METADATA_NAME)
    shards = [f for f in listing.files if f.rel.endswith(dcp.SHARD_SUFFIX)]
    recognised = manifest_files is not None
    if has_metadata:
        recognised = True
        _plan_dcp(plan, files, level, crc=manifest_files is None)
    elif shards:
        recognised = True
        findings.saving(f"{len(shards)} DCP shard(s) but no .metadata")
    for f in listing.files:
        name = f.path.name.lower()
        if name.endswith(TORCH_SUFFIXES) and not f.rel.endswith(dcp.SHARD_SUFFIX):
            recognised = True
            if f.size == 0:
                findings.damage(f"zero-byte file {f.rel}")
                continue
            covered = manifest_files is not None and f.rel in manifest_files
            _add_zip_task(plan, f, full=level == "full" and not covered)
        elif name.endswith(".safetensors"):
            recognised = True
            problem = check_safetensors(f.path, f.size)
            if problem:
                findings.damage(problem)
            findings.note("safetensors headers")
    if not recognised and files:
        findings.damage("no recognised checkpoint files (no .metadata, manifest or torch files)")
    completion_marker = manifest_files is not None or has_metadata or cand.confirmed
    newest = max((f.mtime for f in listing.files), default=0.0)
    if not completion_marker and listing.files and now - newest < recent_s:
        findings.saving(f"no manifest or .metadata and modified {now - newest:.0f}s ago")


def _plan_manifest(plan: Plan, files: dict[str, FileEntry], level: Level) -> set[str] | None:
    """Check the manifest if there is one; return the paths it covers (None: no manifest)."""
    if MANIFEST_NAME not in files:
        return None
    findings = plan.findings
    try:
        entries = read_manifest(plan.candidate.path)
    except ManifestError as exc:
        findings.damage(str(exc))
        return set()
    for entry in entries:
        actual = files.get(entry.path)
        if actual is None:
            findings.damage(f"{entry.path}: listed in the manifest but {plan.missing(entry.path)}")
        elif actual.size != entry.size:
            findings.damage(f"{entry.path}: size {actual.size}, manifest says {entry.size}")
        elif level == "full":
            plan.add_full_task(_sha_task(actual, entry.sha256))
    findings.note("manifest sha256" if level == "full" else "manifest sizes")
    return {e.path for e in entries}


def _plan_dcp(plan: Plan, files: dict[str, FileEntry], level: Level, *, crc: bool) -> None:
    findings, path = plan.findings, plan.candidate.path
    try:
        meta = dcp.load_metadata_safely(path)
        refs = dcp.storage_refs(meta)
        if level == "full":
            dcp.check_structure(meta)
    except dcp.UnsupportedMetadata as exc:
        findings.cannot_judge(str(exc))
        if exc.refs is None:
            return
        refs = exc.refs
    except dcp.MetadataError as exc:
        findings.damage(str(exc))
        return
    for rel, need in sorted(dcp.required_sizes(refs).items()):
        actual = files.get(rel)
        if actual is None:
            if rel in plan.links:
                findings.damage(f"shard {rel} referenced by .metadata is {plan.missing(rel)}")
            else:
                findings.damage(f"missing shard {rel} (referenced by .metadata)")
        elif actual.size == 0:
            findings.damage(f"zero-byte file {rel} (metadata needs {need} bytes)")
        elif actual.size < need:
            findings.damage(f"truncated shard {rel}: {actual.size} bytes, metadata needs {need}")
    findings.note("DCP shard sizes" if findings.unjudged else "DCP metadata and shard sizes")
    if level == "full" and crc and findings.valid:
        by_file: dict[str, list[dcp.StorageRef]] = {}
        for ref in refs:
            by_file.setdefault(ref.relative_path, []).append(ref)
        for rel, file_refs in sorted(by_file.items()):
            plan.add_full_task(_dcp_items_task(files[rel], file_refs, plan.limits))
        findings.note("DCP item CRC-32")


def _dcp_items_task(entry: FileEntry, refs: list[dcp.StorageRef], limits: VerifyLimits) -> FileTask:
    def run(sink: ByteSink) -> str | None:
        return dcp.check_items(entry.path, refs, sink, limits=limits)

    return FileTask(entry.rel, entry.size, run)


def _sha_task(entry: FileEntry, expected: str) -> FileTask:
    def run(sink: ByteSink) -> str | None:
        try:
            actual = sha256_file(entry.path, sink)
        except OSError as exc:
            return f"{entry.rel}: {describe_oserror(exc)}"
        if actual != expected:
            return f"{entry.rel}: sha256 mismatch (manifest {expected[:12]}, file {actual[:12]})"
        return None

    return FileTask(entry.rel, entry.size, run)


def _add_zip_task(plan: Plan, entry: FileEntry, *, full: bool) -> None:
    """Queue the zip check of one torch.save file (structure only above the size cap)."""
    if full and entry.size > plan.limits.max_full_file_bytes:
        plan.findings.limit(plan.too_large(entry.rel, entry.size))
        full = False
    plan.tasks.append(_zip_task(entry, full=full, findings=plan.findings, limits=plan.limits))


def _zip_task(
    entry: FileEntry, *, full: bool, findings: Findings, limits: VerifyLimits
) -> FileTask:
    findings.note("torch.save zip CRC-32" if full else "torch.save zip structure")

    def run(sink: ByteSink) -> str | None:
        try:
            check_archive(entry.path, full=full, on_bytes=sink, limits=limits)
        except ZipDamage as exc:
            return f"{entry.rel}: {exc}"
        except OSError as exc:
            return f"{entry.rel}: {describe_oserror(exc)}"
        return None

    return FileTask(entry.rel, entry.size, run)
