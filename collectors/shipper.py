"""The shipper: a background thread that drains the spool to the server, oldest first.

Delivery guarantees: a batch leaves the spool only when the server acknowledged it (200/202)
or refused it for good (then it moves to the dead-letter table), so no sample is lost by the
agent; batches are sent one at a time in spool order and the same batch is resent only after
a failed or unanswered attempt (the server dedupes those by ``batch_id``).

Failures back off exponentially with full jitter (delay drawn uniformly from 0 to
min(cap, base * 2**failures), as in AWS's "Exponential Backoff and Jitter") so a fleet of
agents does not hammer a recovering server in lockstep; a ``Retry-After`` is honoured as a
minimum. Modelled on sentry-python's background worker: a daemon thread that survives any
exception and a ``flush(timeout)`` for shutdown.
"""

from __future__ import annotations

import logging
import random
import threading
import time
from collections.abc import Callable

from collectors import batch as wire
from collectors import inventory
from collectors.spool import SAMPLES_PATH, Spool, SpooledBatch
from collectors.transport import AUTH, DELIVERED, PERMANENT, HttpTransport, Response

log = logging.getLogger(__name__)

MAX_RETRY_AFTER_S = 3600.0  # a Retry-After beyond an hour is treated as an hour
IDLE_WAIT_S = 1.0


class Shipper:
    def __init__(
        self,
        spool: Spool,
        transport: HttpTransport,
        inventory_doc: dict | None,
        backoff_base_s: float = 1.0,
        backoff_cap_s: float = 300.0,
        clock: Callable[[], float] = time.time,
        rng: random.Random | None = None,
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
        self._reinventoried: set[str] = set()  # batches already retried after re-registering
        self._not_before = 0.0  # earliest time of the next attempt (inventory or batch)
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
        if not flushing and now < self._not_before:
            return self._not_before - now
        if not self.registered:
            return self._register()
        head = self.spool.head()
        if head is None:
            return IDLE_WAIT_S
        if not flushing and head.next_attempt_at > now:
            # Deferred by an earlier run of the agent: that backoff still stands, but a
            # stale date far in the future (clock change) must not stall shipping.
            wait = min(head.next_attempt_at - now, self.backoff_cap_s, MAX_RETRY_AFTER_S)
            self._not_before = now + wait
            return wait
        return self._send(head)

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
