"""Goodput accounting: how much of a job's wall time was training that counts, and what
each interruption cost (detection, recovery, queue wait, recomputed work, start-up)."""
