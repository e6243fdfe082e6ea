"""The node agent: GPU and kernel-log sources → rule engine → de-dup/rate-limit → reporter.

Four concurrent loops share one asyncio loop:

* heartbeat: a :class:`NodeHeartbeat` every ``heartbeat_interval_s``, whatever else happens
  (NVML calls run in worker threads, so a hung GPU cannot stop the heartbeat);
* poll: every ``interval_s`` all NVML counters and states of every GPU;
* events: NVML critical-Xid events, waited on in a worker thread, reported at once;
* kernel log: the NVIDIA driver's records from /dev/kmsg or journald (about this node's
  GPUs: NVML's inventory, else the driver's sysfs devices), reported at once. Where NVML
  is present, a kernel-log root finding about a GPU that NVML has not reported a root
  finding for in the last :data:`NVML_CONFIRMS_S` is sent as weak evidence (diagnostic,
  marked :data:`~resurrect.evidence_trust.UNCONFIRMED_FIELD`): it recovers no job, drains
  no node and makes no lemon until NVML's own finding (or a health check) confirms it.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Callable, Iterable
from datetime import datetime

from resurrect.config import AgentSettings
from resurrect.contracts import Evidence
from resurrect.contracts.node_health import AgentStopped, NodeFindings, NodeHeartbeat
from resurrect.evidence_trust import UNCONFIRMED_FIELD
from resurrect.rules.engine import LineScanner
from resurrect.sensors.node_agent.classify import classify
from resurrect.sensors.node_agent.fence import SelfFence
from resurrect.sensors.node_agent.kernel_log import KernelLogSource
from resurrect.sensors.node_agent.limiter import FindingLimiter
from resurrect.sensors.node_agent.models import Reading
from resurrect.sensors.node_agent.nvml_api import NvmlApi
from resurrect.sensors.node_agent.nvml_source import NvmlSource, utcnow
from resurrect.sensors.node_agent.reporters import AgentReporter, DeliveryError
from resurrect.telemetry.record import record_heartbeat, record_readings

log = logging.getLogger(__name__)

MAX_BACKLOG = 256
# How long NVML's root finding about a GPU confirms the kernel log's about the same GPU.
NVML_CONFIRMS_S = 600.0


class NodeAgent:
    """Watches one node's GPUs and kernel log and reports to a :class:`AgentReporter`."""

    def __init__(
        self,
        settings: AgentSettings,
        *,
        nvml: NvmlApi | None,
        engine: LineScanner,
        reporter: AgentReporter,
        kernel_log: KernelLogSource | None = None,
        clock: Callable[[], float] = time.monotonic,
        now: Callable[[], datetime] = utcnow,
        fence: SelfFence | None = None,
    ) -> None:
        self.settings = settings
        self.fence = fence
        self.node = settings.node_name
        self.engine = engine
        self.reporter = reporter
        self.source = NvmlSource(
            nvml, nvlink_window_s=settings.nvlink_window_s, clock=clock, now=now
        )
        self.kernel_log = kernel_log
        if kernel_log is not None and nvml is not None:
            kernel_log.bind_inventory(self._gpu_pcis(kernel_log))
        self._clock = clock
        self._nvml_found: dict[str, float] = {}  # GPU (PCI) -> when NVML last found a root
        self.limiter = FindingLimiter(
            window_s=settings.dedup_window_s,
            max_per_minute=settings.max_findings_per_minute,
            clock=clock,
        )
        self._now = now
        self._seq = 0
        self._backlog: list[Evidence] = []
        self.polls = 0
        self.readings_seen = 0
        self.findings_sent = 0

    # -- one step each (tests drive these directly) --------------------------------------

    def start(self) -> str:
        """Open NVML and register for Xid events; a one-line description of what is watched."""
        status = self.source.open()
        if not status.available:
            log.warning("node agent on %s: %s; watching no GPUs", self.node, status.reason)
            return status.reason
        registered = self.source.open_events()
        return f"{status.gpu_count} GPUs (driver {status.driver}), Xid events on {registered}"

    def classify(self, readings: Iterable[Reading]) -> list[Evidence]:
        found: list[Evidence] = []
        for reading in readings:
            self.readings_seen += 1
            record_readings(1, reading.metric)
            found.extend(classify(self.engine, reading, node=self.node))
        return found

    async def report(self, evidence: list[Evidence]) -> list[Evidence]:
        """Send the findings the limiter admits (with any not delivered before); returns them.

        Undelivered findings (control plane unreachable) are kept, up to
        ``MAX_BACKLOG``, and sent with the next report or heartbeat: an Xid event seen
        while Temporal was away is not lost.
        """
        admitted = [item for item in evidence if self.limiter.admit(item)]
        if admitted or self._backlog:
            await self._deliver(admitted)
        return admitted

    async def _deliver(self, admitted: list[Evidence]) -> None:
        batch = [*self._backlog, *admitted]
        self._backlog = []
        try:
            await self.reporter.findings(
                NodeFindings(node=self.node, sent_at=self._now(), evidence=batch)
            )
        except DeliveryError as exc:
            log.warning("%d findings kept for the next attempt: %s", len(batch), exc)
            self._backlog = [*batch, *self._backlog][-MAX_BACKLOG:]
            return
        except asyncio.CancelledError:  # stopped mid-send: keep them for the next attempt
            self._backlog = [*batch, *self._backlog][-MAX_BACKLOG:]
            raise
        self.findings_sent += len(batch)

    async def poll_once(self) -> list[Evidence]:
        """Read every GPU once (in a worker thread), classify, report; the admitted findings."""
        readings = await asyncio.to_thread(self.source.poll)
        self.polls += 1
        return await self.report(self._from_nvml(self.classify(readings)))

    async def send_heartbeat(self) -> NodeHeartbeat:
        status = self.source.status
        beat = NodeHeartbeat(
            node=self.node,
            seq=self._seq,
            sent_at=self._now(),
            gpus=status.gpu_count,
            nvml=status.reason,
            silence_threshold_s=self.settings.silence_threshold_s,
        )
        self._seq += 1
        if self.fence is not None:
            # a host thawed after a long freeze fences before a heartbeat could renew
            self.fence.fence_if_expired()
        try:
            await self.reporter.heartbeat(beat)
        except Exception:
            record_heartbeat(ok=False)
            raise
        record_heartbeat(ok=True)
        if self.fence is not None:
            # the controller side's word, as of when the heartbeat it took was sent
            self.fence.lease.renew(getattr(self.reporter, "confirmed_at", None))
        return beat

    # -- the loops -----------------------------------------------------------------------

    async def run(self, stop: asyncio.Event) -> None:
        """Run until ``stop`` is set; then tell the control plane the stop was on purpose."""
        described = await asyncio.to_thread(self.start)
        log.info("node agent on %s: watching %s", self.node, described)
        loops = [self._heartbeat_loop(stop), self._poll_loop(stop), self._event_loop(stop)]
        if self.kernel_log is not None:
            loops.append(self._kernel_loop(stop))
        if self.fence is not None:
            loops.append(self.fence.run(stop))
        tasks = [asyncio.create_task(loop) for loop in loops]
        try:
            await stop.wait()
        finally:
            for task in tasks:
                task.cancel()
            await asyncio.gather(*tasks, return_exceptions=True)
            with contextlib.suppress(Exception):
                await asyncio.wait_for(
                    self.reporter.stopped(AgentStopped(node=self.node, sent_at=self._now())), 5.0
                )
            await asyncio.to_thread(self.source.close)

    async def _heartbeat_loop(self, stop: asyncio.Event) -> None:
        interval = self.settings.heartbeat_interval_s
        while not stop.is_set():
            started = time.monotonic()
            try:
                await asyncio.wait_for(self.send_heartbeat(), timeout=interval * 2)
            except TimeoutError:
                log.warning("heartbeat took longer than %.1fs", interval * 2)
            if self._backlog:  # findings the control plane missed: try again now
                await self._deliver([])
            await _sleep_until(stop, interval - (time.monotonic() - started))

    async def _poll_loop(self, stop: asyncio.Event) -> None:
        interval = self.settings.interval_s
        last_open = time.monotonic()
        while not stop.is_set():
            started = time.monotonic()
            try:
                if self._should_reopen(started - last_open):
                    last_open = started
                    described = await asyncio.to_thread(self.start)
                    log.info("node agent on %s: NVML retried: %s", self.node, described)
                await self.poll_once()
            except Exception:  # one bad poll must never stop the agent
                log.exception("poll failed")
            await _sleep_until(stop, interval - (time.monotonic() - started))

    def _should_reopen(self, since_last_open: float) -> bool:
        """NVML was not there at start (driver still loading?): try again now and then."""
        status = self.source.status
        return (
            not status.available
            and status.retryable
            and since_last_open >= self.settings.nvml_retry_s
        )

    async def _event_loop(self, stop: asyncio.Event) -> None:
        wait_ms = self.settings.event_wait_ms
        while not stop.is_set():
            if not self.source.status.available:
                await _sleep_until(stop, wait_ms / 1000)
                continue
            try:
                readings = await asyncio.to_thread(self.source.wait_event, wait_ms)
                if readings:
                    await self.report(self._from_nvml(self.classify(readings)))
            except Exception:
                log.exception("Xid event handling failed")
                await _sleep_until(stop, wait_ms / 1000)

    async def _kernel_loop(self, stop: asyncio.Event) -> None:
        assert self.kernel_log is not None
        try:
            async for reading in self.kernel_log.readings():
                try:
                    found = self.classify([self._with_gpu(reading)])
                    await self.report(self._weighed_kernel_findings(found))
                except Exception:  # one record must never stop the kernel log
                    log.exception("kernel log: record not handled")
        except OSError as exc:
            log.warning("kernel log: stopped following: %s", exc)

    def _gpu_pcis(self, kernel_log: KernelLogSource) -> Callable[[], set[str]]:
        """This node's GPUs for the kernel log: NVML's inventory while NVML is open, else
        what the kernel log source finds (the ``nvidia`` driver's sysfs devices)."""
        from_sysfs = kernel_log.inventory

        def gpu_pcis() -> set[str]:
            if self.source.status.available:
                return {gpu.pci for gpu in self.source.gpus if gpu.pci}
            return set(from_sysfs())

        return gpu_pcis

    def _from_nvml(self, found: list[Evidence]) -> list[Evidence]:
        """``found`` (NVML's findings), remembering the GPUs it found a root cause on."""
        now = self._clock()
        for item in found:
            pci = item.fields.get("pci")
            if item.role == "root" and pci:
                self._nvml_found[pci] = now
        return found

    def _weighed_kernel_findings(self, found: list[Evidence]) -> list[Evidence]:
        """Kernel-log findings; where NVML is open, a root finding about a GPU NVML found
        no root cause on lately is weak (diagnostic, marked unconfirmed)."""
        if not self.source.status.available:
            return found
        now = self._clock()
        weighed: list[Evidence] = []
        for item in found:
            pci = item.fields.get("pci")
            seen = self._nvml_found.get(pci or "")
            if item.role != "root" or (seen is not None and now - seen <= NVML_CONFIRMS_S):
                weighed.append(item)
                continue
            note = "kernel log only: NVML has not reported a fault of this GPU"
            fields = {**item.fields, UNCONFIRMED_FIELD: note}
            weighed.append(item.model_copy(update={"role": "diagnostic", "fields": fields}))
        return weighed

    def _with_gpu(self, reading: Reading) -> Reading:
        """Name the GPU of a kernel line by its PCI address, when NVML knows it."""
        if reading.gpu is not None or reading.pci is None:
            return reading
        gpu = self.source.gpu_by_pci(reading.pci)
        if gpu is None:
            return reading
        return reading.model_copy(update={"gpu": str(gpu.index), "uuid": gpu.uuid})


async def _sleep_until(stop: asyncio.Event, seconds: float) -> None:
    """Sleep ``seconds`` or until ``stop`` is set, whichever comes first."""
    if seconds <= 0:
        return
    with contextlib.suppress(TimeoutError):
        await asyncio.wait_for(stop.wait(), timeout=seconds)
