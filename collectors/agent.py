"""The run loop: sample every GPU on a fixed schedule, batch, spool, and let the shipper ship.

Sampling runs on the main thread on a schedule anchored to a monotonic clock (tick k is due
at start + k * interval), so slow reads or a busy host do not make the sampling rate drift;
ticks that are missed entirely are skipped rather than bunched up. Shipping runs on its own
thread so that a slow or absent server never delays a reading.

Durability: every tick's samples go to the spool's journal as they are taken, with each GPU's
last energy counter reading, so a crash or SIGKILL loses at most the tick being read. On start
the agent spools what an unclean stop left in the journal, and carries the counter readings
over: the first interval after a restart covers the gap (``"counter_gap"``, collectors/energy.py)
when the counter vouches for it.
"""

from __future__ import annotations

import logging
import marshal
import threading
import time
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Protocol

from collectors import batch as wire
from collectors.energy import EnergyAccountant
from collectors.shipper import Shipper
from collectors.sources import GpuSource
from collectors.spool import Spool

log = logging.getLogger(__name__)

MAX_GAP_INTERVALS = 5.0  # counter deltas over more than 5 intervals are not trusted
BOOT_ID_PATH = "/proc/sys/kernel/random/boot_id"


def boot_id(path: str = BOOT_ID_PATH) -> str | None:
    """This boot's id (Linux): the monotonic clock, and NVML's counters, start again at a boot."""
    try:
        with open(path) as f:
            return f.read().strip() or None
    except OSError:
        return None


class Channel(Protocol):
    """A second kind of data with its own thread and endpoint (CPU/RAM energy, inference
    scraping): started with the agent, spooled at every batch boundary and at shutdown."""

    name: str

    def start(self) -> None: ...

    def stop(self) -> None: ...

    def seal(self, spool: Spool) -> int: ...  # spool what was gathered; returns batches put


@dataclass
class AgentStats:
    samples: int = 0
    batches: int = 0
    skipped_ticks: int = 0


class Agent:
    def __init__(
        self,
        source: GpuSource,
        spool: Spool,
        shipper: Shipper | None,
        interval_s: float = 1.0,
        batch_seconds: float = 10.0,
        flush_timeout_s: float = 5.0,
        channels: Sequence[Channel] = (),
    ) -> None:
        if interval_s <= 0 or batch_seconds <= 0:
            raise ValueError("interval and batch seconds must be positive")
        self.source = source
        self.spool = spool
        self.shipper = shipper
        self.interval_s = interval_s
        self.batch_seconds = batch_seconds
        self.flush_timeout_s = flush_timeout_s
        gpus = source.gpus()
        self.indexes = [g.index for g in gpus]
        self.uuids = {g.index: g.uuid for g in gpus}
        self.energy = EnergyAccountant(max_gap_s=MAX_GAP_INTERVALS * interval_s,
                                       power_limit_w={g.index: g.power_limit_w for g in gpus})
        self.buffer = wire.SampleBuffer()
        self.stats = AgentStats()
        self.channels = list(channels)
        self._stop = threading.Event()
        self.boot_id = boot_id()
        if spool is not None:
            try:
                self.recover()
            except Exception:  # never keep the agent from sampling
                log.exception("could not recover the spool's journal; sampling anyway")

    def stop(self) -> None:
        """Sets the event the loop waits on. Not from a signal handler in the loop's thread:
        the event's lock may be held by that very thread (cli.stop_on_signal calls it from a
        thread of its own)."""
        self._stop.set()

    def sample_once(self) -> None:
        """Read every GPU once. The hot path: no per-sample dicts, a few list appends."""
        ts = time.time()  # wall clock for the data; the monotonic clock for the energy dt
        mono = time.monotonic()
        read, update, append = self.source.read, self.energy.update, self.buffer.append
        start = len(self.buffer)
        try:
            for index in self.indexes:
                r = read(index)
                if r is None:  # no new reading (dcgm-exporter has not refreshed since)
                    continue
                energy_j, method = update(index, mono, r.energy_mj, r.power_w)
                append(ts, index, r, energy_j, method)
        finally:  # what was read is journaled even if a later GPU's read failed
            n = len(self.buffer) - start
            self.stats.samples += n
            if n and self.spool is not None:
                self.journal(start, n, ts - mono)

    def journal(self, start: int, n: int, wall_minus_mono: float) -> None:
        """Write the samples from ``start`` on, and each GPU's last counter reading, to disk."""
        buffer = self.buffer
        columns = {name: getattr(buffer, name)[start:] for name in wire.FIELDS}
        last = self.energy.last_readings()
        state = {
            "boot_id": self.boot_id,
            "source": self.source.kind,
            "wall_minus_mono": wall_minus_mono,  # for a host without a boot id
            "gpus": [[i, self.uuids.get(i), mono, counter]
                     for i, (mono, counter, _) in last.items() if counter is not None],
        }
        # marshal, not JSON: 4 us instead of 26 for 8 GPUs, and only this agent reads it back.
        self.spool.journal(marshal.dumps(columns), n, marshal.dumps(state))

    def recover(self) -> None:
        """After an unclean stop: spool the journaled samples, carry counter readings over."""
        raw_state = self.spool.agent_state()
        state = marshal.loads(raw_state) if raw_state else {}
        ticks = self.spool.journaled()
        if ticks:
            buffer = wire.SampleBuffer()
            for tick in ticks:
                doc = marshal.loads(tick)
                n = len(doc["ts"])
                for name in wire.FIELDS:  # a field an older agent did not journal is unknown
                    getattr(buffer, name).extend(doc.get(name) or [None] * n)
            n = len(buffer)
            batch = wire.build_batch(buffer.columns(), state.get("source") or self.source.kind)
            self.spool.put(batch["batch_id"], wire.encode(batch), n, seal_journal=True)
            log.warning("spooled %d sample(s) that an unclean stop left unbatched", n)
        self._carry_counters(state)

    def _carry_counters(self, state: dict) -> None:
        gpus = state.get("gpus") or []
        if not gpus:
            return
        now_mono, now_wall = time.monotonic(), time.time()
        if self.boot_id is not None and state.get("boot_id") == self.boot_id:
            shift = 0.0  # same boot: the monotonic clock runs on across processes
        elif self.boot_id is None and state.get("boot_id") is None and isinstance(
                state.get("wall_minus_mono"), (int, float)):
            # No boot id to compare (not Linux): place the old reading by the wall clock.
            shift = (state["wall_minus_mono"] + 0.0) - (now_wall - now_mono)
        else:
            log.info("host rebooted since the last run: no counter carried over")
            return
        carried = []
        for index, uuid, mono, counter in gpus:
            if self.uuids.get(index) == uuid and isinstance(counter, int):
                self.energy.carry(index, mono + shift, counter)
                carried.append(index)
        if carried:
            gap = now_mono - max(mono + shift for _, _, mono, _ in gpus)
            log.info("last counter reading carried over for GPU(s) %s (%.1f s ago)",
                     ",".join(map(str, carried)), gap)

    def seal_batch(self) -> str | None:
        """Move the buffered samples into the spool as one batch; returns its id."""
        n = len(self.buffer)
        if n == 0:
            return None
        doc = wire.build_batch(self.buffer.columns(), self.source.kind)
        self.spool.put(doc["batch_id"], wire.encode(doc), n, seal_journal=True)
        self.buffer.clear()
        self.stats.batches += 1
        if self.shipper is not None:
            self.shipper.wake()
        return doc["batch_id"]

    def seal_channels(self) -> None:
        put = 0
        for channel in self.channels:
            try:
                put += channel.seal(self.spool)
            except Exception:  # a broken channel must not stop GPU sampling
                log.exception("%s: spooling failed; continuing", channel.name)
        if put and self.shipper is not None:
            self.shipper.wake()

    def run(self) -> AgentStats:
        if self.shipper is not None:
            self.shipper.start()
        for channel in self.channels:
            channel.start()
        start = time.monotonic()
        tick = 0
        next_batch_at = start + self.batch_seconds
        log.info(
            "sampling %d GPU(s) from %s every %gs, a batch every %gs",
            len(self.indexes),
            self.source.kind,
            self.interval_s,
            self.batch_seconds,
        )
        try:
            while not self._stop.is_set():
                try:
                    self.sample_once()
                except Exception:  # one bad read must not end the monitoring
                    log.exception("sampling failed; continuing")
                now = time.monotonic()
                if now >= next_batch_at:
                    self.seal_batch()
                    self.seal_channels()
                    next_batch_at += self.batch_seconds * max(
                        1, int((now - next_batch_at) // self.batch_seconds) + 1
                    )
                tick += 1
                due = start + tick * self.interval_s
                if due < now:  # overran: skip the ticks we missed instead of bunching them
                    missed = int((now - due) // self.interval_s) + 1
                    self.stats.skipped_ticks += missed
                    tick += missed
                    due = start + tick * self.interval_s
                self._stop.wait(due - now)
        finally:
            self.shutdown()
        return self.stats

    def shutdown(self) -> None:
        self.seal_batch()
        for channel in self.channels:
            channel.stop()
        self.seal_channels()
        if self.shipper is not None:
            flushed = self.shipper.flush(self.flush_timeout_s)
            self.shipper.stop(join_timeout_s=0.5)
            if not flushed:
                log.warning(
                    "%d batch(es) left in the spool %s; they will be sent on the next start",
                    self.spool.depth(),
                    self.spool.path,
                )
        log.info(
            "stopped: samples=%d batches=%d skipped_ticks=%d spool_depth=%d",
            self.stats.samples,
            self.stats.batches,
            self.stats.skipped_ticks,
            self.spool.depth(),
        )
