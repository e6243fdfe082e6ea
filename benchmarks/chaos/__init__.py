"""The chaos soak's parts (benchmarks/chaos_soak.py): fault kinds, the seeded schedule, the
history the soak records, the invariants checked on it and the figures drawn from it. The
kinds, the schedule and the invariants are data and pure functions: tests check them on
constructed histories, without a cluster."""
