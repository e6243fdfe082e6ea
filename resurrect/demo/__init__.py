"""The one-command demo: local Slurm cluster, resurrect, a training job, a fault, a recovery."""
