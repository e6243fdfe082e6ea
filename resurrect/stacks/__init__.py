"""Where each rank of a job is: stacks read with py-spy, classified into victims and culprits.

* :mod:`.processes` — the rank processes of a job on this node (``/proc``, as root);
* :mod:`.pyspy` — one bounded ``py-spy dump`` per process, parsed (:mod:`.pyspy_text`);
* :mod:`.classify` — a rank blocked in a collective is a victim; a rank elsewhere (stopped, in
  a data loader, a CUDA call, a lock) is the culprit;
* :mod:`.flight_recorder` — the last collective each rank entered, from PyTorch's Flight
  Recorder dumps, parsed by a bounded helper as the rank's owner
  (:mod:`.flight_recorder_dump`, :mod:`resurrect.untrusted`);
* :mod:`.collect` — all of it for one job on one node, within a time bound.
"""
