"""Node liveness without a Temporal action per heartbeat.

Agents send authenticated UDP heartbeats (:mod:`.wire`) to a collector in the watcher
process (:mod:`.collector`), which keeps one silence deadline per node and tells the
node's health workflow only about changes (:mod:`.forward`): a node heard for the first
time, a node that fell silent, a node heard again.
"""
