"""The shipper: a background thread that drains the spool to the server, oldest first.

Delivery guarantees: a batch leaves the spool only when the server acknowledged it (200/202)
or refused it for good (then it moves to the dead-letter table), so no sample is lost by the
agent; batches are sent one at a time in spool order and the same batch is resent only after
a failed or unanswered attempt (the server dedupes those by ``batch_id``).

A backlog (the server was away, the agent restarted) goes out merged: the oldest spooled sample
batches, up to MERGE_MAX_SAMPLES, in one POST, so a fleet catching up costs the server one
request per few thousand samples instead of one per 10 s batch. The merged batch's id is derived
from the ids it holds (a resend of the same merge is a duplicate to the server), and every sample
keeps its natural key (GPU, timestamp), which is the server's primary key: a merge that the
server stored but the agent never saw acknowledged, resent later alone or in another merge,
stores nothing twice. Batches are acked only after the server answered 202 for the merge; if the
server refuses a merge, the head batch goes alone, so one bad batch is judged by itself.

Failures back off exponentially with full jitter (delay drawn uniformly from 0 to
min(cap, base * 2**failures), cap 60 s, as in AWS's "Exponential Backoff and Jitter") so a
fleet of agents does not hammer a recovering server in lockstep; a ``Retry-After`` is honoured
as a minimum. While a server gives no answer at all, a cheap GET /api/v1/time every
PROBE_INTERVAL_S finds its return, and sending resumes within seconds rather than at the end
of the backoff. Modelled on sentry-python's background worker: a daemon thread that survives any
exception and a ``flush(timeout)`` for shutdown.
"""

from __future__ import annotations

import logging
import random
import threading
import time
import uuid
from collections.abc import Callable

from collectors import batch as wire
from collectors import inventory
from collectors.spool import SAMPLES_PATH, Spool, SpooledBatch
from collectors.transport import AUTH, DELIVERED, PERMANENT, HttpTransport, Response

log = logging.getLogger(__name__)

MAX_RETRY_AFTER_S = 3600.0  # a Retry-After beyond an hour is treated as an hour
IDLE_WAIT_S = 1.0
# While backing off from a server that did not answer, ask GET /api/v1/time this often (a few
# hundred bytes, no auth, no database): when it answers, sending resumes at once instead of at
# the end of a backoff of up to backoff_cap_s.
PROBE_INTERVAL_S = 5.0
# A merged POST holds at most this many samples (the server takes up to INGEST_MAX_SAMPLES,
# 100,000 by default) and this many spooled batches: 4,000 is 50 of an 8-GPU host's 10 s batches,
# where the server's cost per POST no longer matters next to its cost per sample.
MERGE_MAX_SAMPLES = 4_000
MERGE_MAX_BATCHES = 200
# Merged batch ids are UUIDv5 of the member ids in this namespace (fixed: changing it would make
# a resent merge look new to the server, which is harmless but pointless).
MERGE_NAMESPACE = uuid.UUID("5f1c2f5e-3c1b-4d3e-9a52-6a0c8f0e7b11")


class Shipper:
    def __init__(
        self,
        spool: Spool,
        transport: HttpTransport,
        inventory_doc: dict | None,
        backoff_base_s: float = 1.0,
        backoff_cap_s: float = 60.0,
        clock: Callable[[], float] = time.time,
        rng: random.Random | None = None,
        merge_max_samples: int = MERGE_MAX_SAMPLES,
    ) -> None:
        self.spool = spool
        self.transport = transport
        self.inventory_doc = inventory_doc
        self.registered = inventory_doc is None  # nothing to register: ship straight away
        self.backoff_base_s = backoff_base_s
        self.backoff_cap_s = backoff_cap_s
        self.clock = clock
        self.rng = rng or random.Random()
        self.failures = 0  # consecutive failed attempts, drives the backoff
        self.sent_batches = 0
        self.rejected_batches = 0
        self.refused_windows = 0  # inference windows the server stored a batch without
        self.merge_max_samples = merge_max_samples  # 0: one POST per spooled batch
        self.merged_posts = 0  # POSTs that carried more than one spooled batch
        self._send_alone: set[str] = set()  # head batches a merge was refused with
        self._reinventoried: set[str] = set()  # batches already retried after re-registering
        self._not_before = 0.0  # earliest time of the next attempt (inventory or batch)
        self._next_probe_at = 0.0
        self._unreachable = False  # the last failure had no answer at all (probe-worthy)
        self.probes = 0
        self._resumed = False
        self._wake = threading.Event()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._flush_deadline: float | None = None
        self._flush_failed = False

    # --- one unit of work (tests call this directly) -----------------------------------------

    def step(self) -> float:
        """Do one attempt if one is due; return how long to wait before the next step."""
        now = self.clock()
        flushing = self._flush_deadline is not None
        # Backing off, unless the probe finds the server back (_probe_says_back ends it).
        if not flushing and now < self._not_before and not self._probe_says_back(now):
            return self._until_probe(self._not_before - now)
        if not self.registered:
            return self._register()
        head = self.spool.head()
        if head is None:
            return IDLE_WAIT_S
        if not flushing and head.next_attempt_at > now and not self._resumed:
            # Deferred by an earlier run of the agent: that backoff still stands, but a
            # stale date far in the future (clock change) must not stall shipping.
            wait = min(head.next_attempt_at - now, self.backoff_cap_s, MAX_RETRY_AFTER_S)
            self._not_before = now + wait
            return wait
        if (head.path == SAMPLES_PATH and self.merge_max_samples > 0
                and head.batch_id not in self._send_alone and self.spool.depth() > 1):
            group = self._mergeable(head)
            if len(group) > 1:
                return self._until_probe(self._send_merged(group))
        return self._until_probe(self._send(head))

    def _until_probe(self, wait: float) -> float:
        """A backoff wait, cut short at the next probe while the server does not answer."""
        if wait > 0 and self._probing():
            return min(wait, max(0.0, self._next_probe_at - self.clock()))
        return wait

    def _probing(self) -> bool:
        return (self._unreachable and self._flush_deadline is None
                and hasattr(self.transport, "probe"))

    def _probe_says_back(self, now: float) -> bool:
        """During a backoff after a server that did not answer: a cheap GET every
        PROBE_INTERVAL_S; True (the backoff is over) once it answers."""
        if not self._probing() or now < self._next_probe_at:
            return False
        self._next_probe_at = now + PROBE_INTERVAL_S
        self.probes += 1
        if not self.transport.probe():
            return False
        log.info("server answers again after %d failed attempt(s); sending the spool",
                 self.failures)
        self._not_before = now
        self._unreachable = False
        self._resumed = True  # a head deferred by the failed attempts goes now
        return True

    def _timeout(self) -> float | None:
        # During a shutdown flush a request must not outlive the flush deadline.
        if self._flush_deadline is None:
            return None
        return max(0.2, min(self.transport.timeout_s, self._flush_deadline - self.clock()))

    def _register(self) -> float:
        assert self.inventory_doc is not None
        resp = inventory.register(self.transport, self.inventory_doc, self._timeout())
        outcome = resp.outcome
        if outcome == DELIVERED:
            log.info("inventory registered (%d GPUs)", len(self.inventory_doc["gpus"]))
            self.registered = True
            self.failures = 0
            return 0.0
        if outcome == PERMANENT:
            # Do not block samples forever on an inventory the server refuses: they stay
            # safe, and a gpu_index the server does not know gets them dead-lettered.
            log.error("server refused the inventory (%s); shipping samples anyway", resp.describe())
            self.registered = True
            return 0.0
        if outcome == AUTH:
            log.error("token rejected by %s (%s)", self.transport.server, resp.describe())
        else:
            log.warning("inventory not registered yet (%s); will retry", resp.describe())
        return self._fail(resp)

    def _send(self, head: SpooledBatch) -> float:
        now = self.clock()
        # Only the samples endpoint takes the backlog report; /inference refuses unknown keys.
        backlog = (
            {"depth": self.spool.depth(), "oldest_age_s": self.spool.oldest_age(now)}
            if head.path == SAMPLES_PATH
            else None
        )
        body = wire.restamp(head.payload, now, backlog)
        resp = self.transport.post(head.path, body, gzipped=True, timeout_s=self._timeout())
        outcome = resp.outcome
        if outcome == DELIVERED:
            self.spool.ack(head.batch_id, self.clock())
            self.sent_batches += 1
            self.failures = 0
            self._reinventoried.discard(head.batch_id)
            self._send_alone.discard(head.batch_id)
            log.debug("batch %s delivered (%d samples)", head.batch_id, head.samples)
            self._log_refused(head, resp)
            return 0.0
        if outcome == PERMANENT:
            field = resp.error_field() or ""
            if (
                resp.status == 422
                and head.path == SAMPLES_PATH
                and field.startswith("samples.gpu_index")
                and self.inventory_doc is not None
                and head.batch_id not in self._reinventoried
            ):
                # The server does not know one of our GPUs: register again, then resend once.
                log.warning(
                    "server does not know a GPU (%s); registering inventory again", resp.describe()
                )
                self._reinventoried.add(head.batch_id)
                self.registered = False
                return 0.0
            log.error(
                "server refused batch %s for good (%s); moved to the rejected table",
                head.batch_id,
                resp.describe(),
            )
            self.spool.reject(head.batch_id, resp.status, resp.body)
            self.rejected_batches += 1
            self._reinventoried.discard(head.batch_id)
            self._send_alone.discard(head.batch_id)
            return 0.0
        if outcome == AUTH:
            log.error(
                "token rejected by %s (%s); keeping batches and retrying",
                self.transport.server,
                resp.describe(),
            )
        else:
            log.warning("batch %s not delivered (%s); will retry", head.batch_id, resp.describe())
        delay = self._fail(resp)
        self.spool.defer(head.batch_id, self.clock() + delay, resp.describe())
        return delay

    # --- merging a backlog -----------------------------------------------------------------

    def _mergeable(self, head: SpooledBatch) -> list[tuple[SpooledBatch, dict]]:
        """The head and the sample batches right behind it that can share one POST: same
        source, agent version and columns, no (GPU, timestamp) twice (the server refuses a batch
        that repeats one), at most merge_max_samples in all. Stops at the first that does not
        fit, so spool order is kept."""
        group: list[tuple[SpooledBatch, dict]] = []
        keys: set[tuple[int, float]] = set()
        total = 0
        for item in self.spool.peek(MERGE_MAX_BATCHES):
            if item.path != SAMPLES_PATH or total + item.samples > self.merge_max_samples:
                break
            try:
                doc = wire.decode(item.payload)
                samples = doc["samples"]
                mine = set(zip(samples["gpu_index"], samples["ts"], strict=True))
            except (ValueError, KeyError, TypeError, OSError, EOFError):
                break  # not a batch this agent can read: it goes alone, and the server judges
            if group:
                first = group[0][1]
                if (doc.get("source") != first.get("source")
                        or doc.get("agent_version") != first.get("agent_version")
                        or samples.keys() != first["samples"].keys() or not keys.isdisjoint(mine)):
                    break
            elif item.batch_id != head.batch_id:
                break  # the spool changed under us: try again next step
            group.append((item, doc))
            keys |= mine
            total += item.samples
        return group

    def _send_merged(self, group: list[tuple[SpooledBatch, dict]]) -> float:
        head = group[0][0]
        ids = [item.batch_id for item, _ in group]
        first = group[0][1]
        columns = {name: [v for _, doc in group for v in doc["samples"][name]]
                   for name in first["samples"]}
        now = self.clock()
        merged = {
            "batch_id": str(uuid.uuid5(MERGE_NAMESPACE, "\n".join(ids))),
            "agent_version": first.get("agent_version", ""),
            "sent_at": now,
            "source": first["source"],
            "samples": columns,
            "spool": {"depth": self.spool.depth(), "oldest_age_s": self.spool.oldest_age(now)},
        }
        resp = self.transport.post(SAMPLES_PATH, wire.encode(merged), gzipped=True,
                                   timeout_s=self._timeout())
        outcome = resp.outcome
        if outcome == DELIVERED:
            for batch_id in ids:  # a crash in here leaves some spooled: resent, stored once
                self.spool.ack(batch_id, self.clock())
            self.sent_batches += len(ids)
            self.merged_posts += 1
            self.failures = 0
            log.debug("%d batches delivered in one POST (%s, %d samples)", len(ids),
                      merged["batch_id"], len(columns["ts"]))
            return 0.0
        if outcome == PERMANENT:
            # Refused for good: judge the head batch alone (it may be the bad one, or the merge
            # may be too big for this server), without dead-lettering anything here.
            log.warning("server refused %d merged batches (%s); sending %s alone", len(ids),
                        resp.describe(), head.batch_id)
            self._send_alone.add(head.batch_id)
            if resp.status == 413:  # this server takes smaller batches: stop merging
                self.merge_max_samples = 0
            return 0.0
        if outcome == AUTH:
            log.error("token rejected by %s (%s); keeping batches and retrying",
                      self.transport.server, resp.describe())
        else:
            log.warning("%d merged batches not delivered (%s); will retry", len(ids),
                        resp.describe())
        delay = self._fail(resp)
        self.spool.defer(head.batch_id, self.clock() + delay, resp.describe())
        return delay

    def _log_refused(self, head: SpooledBatch, resp: Response) -> None:
        """/inference stores the valid windows of a batch and names the ones it refused; those
        are not resent (the server refused them for good), but each is logged with its field."""
        refused = resp.refused()
        for item in refused:
            log.error("server refused window %s of batch %s (%s: %s)", item.get("index"),
                      head.batch_id, item.get("field"), item.get("message"))
        self.refused_windows += len(refused)

    def _fail(self, resp: Response) -> float:
        if self._flush_deadline is not None:
            self._flush_failed = True  # at shutdown, one failed attempt ends the flush
        delay = self.backoff_delay(self.failures, resp.retry_after_s)
        self.failures += 1
        self._not_before = self.clock() + delay
        # No answer at all (refused, timed out): probe for the server's return. An answer
        # (5xx, 429, a Retry-After) means it is up and said when to come back: wait.
        self._unreachable = resp.status is None
        self._next_probe_at = self.clock() + min(PROBE_INTERVAL_S, delay)
        self._resumed = False
        return delay

    def backoff_delay(self, failures: int, retry_after_s: float | None = None) -> float:
        ceiling = min(self.backoff_cap_s, self.backoff_base_s * 2.0 ** min(failures, 62))
        delay = self.rng.uniform(0.0, ceiling)
        if retry_after_s is not None:
            delay = max(delay, min(retry_after_s, MAX_RETRY_AFTER_S))
        return delay

    # --- the background thread -------------------------------------------------------------

    def start(self) -> None:
        self._thread = threading.Thread(target=self._run, name="greenops-shipper", daemon=True)
        self._thread.start()

    def _run(self) -> None:
        while not self._stop.is_set():
            try:
                delay = self.step()
            except Exception:  # the thread must outlive any bug or I/O error
                log.exception("shipper step failed; continuing")
                delay = IDLE_WAIT_S
            if delay > 0:
                self._wake.wait(delay)
                self._wake.clear()

    def wake(self) -> None:
        """A new batch was spooled: ship it now rather than at the end of an idle wait."""
        self._wake.set()

    def flush(self, timeout_s: float) -> bool:
        """Try to empty the spool within ``timeout_s``, ignoring backoff timers (shutdown).

        Stops early, returning False, at the first failed attempt: an unreachable server
        must not hold up a shutdown, and the batches stay spooled for the next start.
        """
        if self._thread is None or not self._thread.is_alive():
            return self.spool.depth() == 0
        deadline = self.clock() + timeout_s
        self._flush_failed = False
        self._flush_deadline = deadline
        self.wake()
        try:
            while self.clock() < deadline:
                if self.spool.depth() == 0:
                    return True
                if self._flush_failed:
                    return False
                time.sleep(0.01)
            return self.spool.depth() == 0
        finally:
            self._flush_deadline = None

    def stop(self, join_timeout_s: float = 1.0) -> None:
        self._stop.set()
        self._wake.set()
        if self._thread is not None:
            self._thread.join(join_timeout_s)

    def alive(self) -> bool:
        return self._thread is not None and self._thread.is_alive()
