"""``resurrect simulate``: a discrete-event what-if simulation of the cluster's jobs."""
