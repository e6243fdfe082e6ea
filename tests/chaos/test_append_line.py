"""The soak prints a fault's line into a job's output only once the job has opened it: a file
the soak created first (as root) locked every attempt of the suite's seed-4 job 6 out of its
own output ("Could not open stdout file ... Permission denied"), a restart loop the soak made."""

from __future__ import annotations

from pathlib import Path

import pytest

from benchmarks.chaos.jobs import append_line


def test_a_line_is_appended_to_an_output_the_job_opened(tmp_path: Path) -> None:
    out = tmp_path / "srun-2n-6.out"
    out.write_text("step 1\n")
    append_line(out, "NVRM: Xid (PCI:0000:3b:00): 79, pid=4242, name=python")
    assert out.read_text().splitlines() == [
        "step 1",
        "NVRM: Xid (PCI:0000:3b:00): 79, pid=4242, name=python",
    ]


def test_no_output_is_created_for_a_job_that_has_not_opened_it(tmp_path: Path) -> None:
    out = tmp_path / "srun-2n-6.out"
    with pytest.raises(FileNotFoundError):
        append_line(out, "NVRM: Xid (PCI:0000:3b:00): 79, pid=4242, name=python")
    assert not out.exists()
