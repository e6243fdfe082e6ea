"""Lemon nodes: nodes whose failures recur across incidents, jobs and time.

:mod:`.incidents` turns one recovery's evidence into per-node incidents, :mod:`.score` scores
a node's incident record (pure), :mod:`.policy` is what a recovery does about lemons (flag,
exclude, drain), :mod:`.records` reads and writes the record (each node's repair workflow),
:mod:`.publisher` exports the scores as metrics. docs/lemon-nodes.md explains the figures.
"""
