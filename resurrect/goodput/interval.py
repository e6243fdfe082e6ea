"""The checkpoint interval that maximises expected goodput, and the closed forms it is
compared with. Pure functions of four measured figures:

* ``save_s`` (Ts): how long a save blocks training;
* ``mtbf_s`` (Tf): the job's mean time between interruptions while it runs (the cluster's
  rate per node-hour times the job's nodes, inverted);
* ``recovery_s`` (Tr): what each interruption costs besides lost work: detection, recovery,
  queue, and restart to the first step;
* ``interval_s`` (tau): training time between the end of one save and the start of the next.

The model (exponential interruptions while the job runs, saves included; none while it
recovers; a save that is interrupted does not count). One segment is ``tau`` of training
then a save of ``Ts``; an interruption anywhere in it costs the time spent in the segment
plus ``Tr`` and the segment starts over. With ``lambda = 1/Tf`` the expected wall time of a
segment is ``(exp(lambda (tau + Ts)) - 1) (Tf + Tr)``, so the expected goodput is::

    G(tau) = tau / ((exp((tau + Ts) / Tf) - 1) (Tf + Tr))

``G`` tends to ``tau / (tau + Ts)`` without interruptions. Its maximum is where
``1 - exp(-(tau + Ts)/Tf) = tau/Tf`` (``Tr`` scales ``G`` but does not move the optimum),
found here by bisection. The closed forms, for comparison:

* Young (1974): ``tau = sqrt(2 Ts Tf)``;
* Daly (2006), higher order: ``tau = sqrt(2 Ts Tf) (1 + sqrt(Ts/(2 Tf))/3 + Ts/(18 Tf)) - Ts``
  for ``Ts < 2 Tf``, else ``Tf``;
* NVIDIA (arXiv 2410.18124): checkpoint period ``Tc = Ts + sqrt(2 (Tf + Tr) Ts + Ts^2)``,
  that is ``tau = sqrt(2 (Tf + Tr) Ts + Ts^2)``.
"""

from __future__ import annotations

import math

from resurrect.errors import ConfigError

_BISECTION_STEPS = 200


def _check(save_s: float, mtbf_s: float, recovery_s: float = 0.0) -> None:
    if not (save_s >= 0 and mtbf_s > 0 and recovery_s >= 0) or math.isinf(mtbf_s):
        raise ConfigError(
            f"interval model needs save >= 0, 0 < mtbf < inf, recovery >= 0"
            f" (got {save_s}, {mtbf_s}, {recovery_s})"
        )


def expected_goodput(interval_s: float, save_s: float, mtbf_s: float, recovery_s: float) -> float:
    """``G(tau)``: the expected fraction of wall time that is kept training."""
    _check(save_s, mtbf_s, recovery_s)
    if interval_s <= 0:
        return 0.0
    exponent = (interval_s + save_s) / mtbf_s
    if exponent > 700:  # exp overflows; the goodput is 0 to any precision that matters
        return 0.0
    return interval_s / (math.expm1(exponent) * (mtbf_s + recovery_s))


def optimal_interval(save_s: float, mtbf_s: float) -> float:
    """The ``tau`` maximising :func:`expected_goodput` (seconds of training per save)."""
    _check(save_s, mtbf_s)
    if save_s == 0:
        return 0.0  # free saves: save after every step
    # u = tau/Tf solves 1 - exp(-(u + a)) = u with a = Ts/Tf; the left side minus u is
    # positive at u = 0 and negative at u = 1.
    a = save_s / mtbf_s
    low, high = 0.0, 1.0
    for _ in range(_BISECTION_STEPS):
        middle = (low + high) / 2
        if -math.expm1(-(middle + a)) > middle:
            low = middle
        else:
            high = middle
        if high - low < 1e-12:
            break
    return (low + high) / 2 * mtbf_s


def young_interval(save_s: float, mtbf_s: float) -> float:
    """Young's first-order optimum ``sqrt(2 Ts Tf)``."""
    _check(save_s, mtbf_s)
    return math.sqrt(2 * save_s * mtbf_s)


def daly_interval(save_s: float, mtbf_s: float) -> float:
    """Daly's higher-order optimum (``Tf`` when the save takes two MTBFs or more)."""
    _check(save_s, mtbf_s)
    if save_s >= 2 * mtbf_s:
        return mtbf_s
    ratio = save_s / (2 * mtbf_s)
    return math.sqrt(2 * save_s * mtbf_s) * (1 + math.sqrt(ratio) / 3 + ratio / 9) - save_s


def nvidia_interval(save_s: float, mtbf_s: float, recovery_s: float) -> float:
    """NVIDIA's ``Tc - Ts`` with ``Tc = Ts + sqrt(2 (Tf + Tr) Ts + Ts^2)``."""
    _check(save_s, mtbf_s, recovery_s)
    return math.sqrt(2 * (mtbf_s + recovery_s) * save_s + save_s**2)
