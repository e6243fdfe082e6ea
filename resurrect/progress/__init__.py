"""Training progress read from what a job prints: step lines, phases, hangs, stragglers.

* :mod:`.models` / :mod:`.loader` — progress rules as data (``packs/*.yaml``), each with
  examples it must (not) match;
* :mod:`.parser` — one printed line -> a :class:`~.parser.ProgressEvent` (step, total, step
  time, phase, rank);
* :mod:`.tracker` — a job's progress so far (beat interval, phase, last progress);
* :mod:`.hang` — the adaptive, phase-aware hang decision;
* :mod:`.straggler` — which rank its peers wait for, and whether a restart pays off.
"""
