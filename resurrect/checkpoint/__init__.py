"""Checkpoint integrity: discover a job's checkpoints, verify them, and prepare a safe resume.

Public API:

* :func:`verify_root` - verify every checkpoint under a root, newest valid first.
* :func:`prepare_resume` - quarantine damaged newest checkpoints and point the job at the
  newest intact one (never deletes anything).
* :func:`resume_path` - what a training script calls on start to find where to resume from.
* :func:`write_manifest` - what a training script calls after a save to record sizes and
  sha256 of every file of a checkpoint.
"""

from __future__ import annotations

from resurrect.checkpoint.manifest import MANIFEST_NAME, write_manifest
from resurrect.checkpoint.prepare import prepare_resume
from resurrect.checkpoint.resume import HINT_NAME, resume_path
from resurrect.checkpoint.verify import Level, verify_root

__all__ = [
    "HINT_NAME",
    "MANIFEST_NAME",
    "Level",
    "prepare_resume",
    "resume_path",
    "verify_root",
    "write_manifest",
]
