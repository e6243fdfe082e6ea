"""Reading what a job wrote outside the processes that must stay alive.

* :mod:`.runner` — start the parse helper (argv list, its own session, cwd ``/``, a minimal
  environment), give it a wall-clock deadline and an output cap, kill its process group
  when either is passed; every failure is a note (:class:`~resurrect.errors.JobFileRefused`);
* :mod:`.helper` — ``python -m resurrect.untrusted.helper``: caps its own address space and
  CPU time, becomes the job's owner, parses one job file, prints one JSON line;
* :mod:`.privileges` — becoming the owner and the resource limits (also the checkpoint
  helper's);
* :mod:`.plain_pickle` — a pickle reader that builds plain data only (string dict keys).
"""
