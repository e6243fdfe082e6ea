"""The job-log follower: reads what running opted-in jobs print, as they print it.

For every running opted-in job it follows the job's stdout/stderr files (paths from the
scheduler; new jobs are picked up as they start, finished ones dropped), reads only the
bytes appended since the last look, and feeds complete lines to the rule engine. Looks
are adaptive (:mod:`sensors.poll_schedule`): every ``watcher.log_poll_interval_s`` for a job
that is printing, backing off to ``watcher.log_quiet_max_s`` for a quiet one, with at most
``watcher.log_quiet_looks_per_s`` looks at quiet jobs per second in all; a file stays open
between looks, so a look that finds nothing new is one ``fstat`` of the open file and one
``lstat`` of its path (rotation). A root-cause match of a class that means the job
cannot finish in place (a lost GPU while the other ranks wait in a collective, a failed
link, a lost node) reports an interruption at once, so the recovery can cancel the stuck
job instead of waiting out its NCCL timeout.

Each look at a job takes at most the job's share of the follower
(:mod:`sensors.follower_share`: bytes read, distinct lines, CPU time), so one job's output
cannot delay another's detection; what a look leaves is read at the job's next look, after
the other due jobs. A line seen already in the same read, and a blank line, is dropped in C
loops; a job that falls more than the share's ``max_behind`` bytes behind goes on from its
last ``resume_from`` bytes, with a note saying how much was skipped.

A requeued job's files are followed from their end when its attempt is first seen running
(earlier attempts' lines were judged by their recoveries); its reports carry that point
(``Interruption.output_marks``), from where its recovery reads the files.

Truncation (the file got shorter) and rotation (another inode at the path) restart reading
from the top. Partial lines wait for their end, bounded by ``MAX_PENDING`` bytes; a longer
line is cut and scanned by its head. Bytes are untrusted: invalid UTF-8 is replaced.

The package: :mod:`~sensors.log_follower.follower` (the jobs followed, a look at each, the
reports) and :mod:`~sensors.log_follower.followed_file` (one file's reading). Import from
here; :data:`__all__` is what the rest of resurrect uses.
"""

from resurrect.sensors.log_follower.followed_file import FollowedFile
from resurrect.sensors.log_follower.follower import (
    INTERRUPTING_CLASSES,
    FollowedJob,
    JobLogFollower,
    hang_check_interval,
    local_ranks,
)

__all__ = [
    "INTERRUPTING_CLASSES",
    "FollowedFile",
    "FollowedJob",
    "JobLogFollower",
    "hang_check_interval",
    "local_ranks",
]
