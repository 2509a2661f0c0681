"""Live chat traffic for the demo: every minute, the replies the serving GPUs' load implies,
reported with the public client (collectors.client) as an application would report them."""

from __future__ import annotations

import logging
import threading
import time

from collectors.client import GreenOpsClient, GreenOpsError
from greenops.demo.story import (
    CHAT_WORKLOAD,
    REPLIES_PER_GPU_S,
    TOKENS_PER_REPLY,
    StorySource,
    chat_latencies_ms,
)

log = logging.getLogger(__name__)
PERIOD_S = 60.0
# Latencies sent per window: a sample of the replies is enough for the histogram's shape.
LATENCY_SAMPLE = 200


def replies(source: StorySource, start: float, end: float) -> int:
    """Replies served in [start, end): the GPUs' mean utilisation (every 10 s) x capacity."""
    samples = [
        source.utilisation(i, start + s)
        for i in range(source.host.gpus)
        for s in range(0, max(int(end - start), 1), 10)
    ]
    busy = sum(samples) / len(samples) / 100
    return int(busy * REPLIES_PER_GPU_S * source.host.gpus * (end - start))


def run(client: GreenOpsClient, source: StorySource, stop: threading.Event, since: float) -> None:
    last = since
    stopping = False
    while not stopping:
        # Stopping sends the window since the last one before ending, as the agents flush.
        stopping = stop.wait(PERIOD_S)
        now = time.time()
        n = replies(source, last, now)
        sample = chat_latencies_ms(source, now, min(n, LATENCY_SAMPLE))
        # Scale the sampled latencies up to n: the client bins every latency it is given.
        latencies = [sample[k % len(sample)] for k in range(n)] if sample else []
        try:
            client.record_inferences(
                CHAT_WORKLOAD,
                n,
                latencies,
                tokens=n * TOKENS_PER_REPLY,
                success=n,
                failure=0,
                end=now,
                start=last,
            )
        except GreenOpsError as exc:  # the server is starting or stopping: try next minute
            log.warning("demo traffic: %s", exc)
            continue
        last = now


def start(
    server: str, token: str, source: StorySource, stop: threading.Event, since: float
) -> threading.Thread:
    thread = threading.Thread(
        target=run,
        args=(GreenOpsClient(server, token, retries=0), source, stop, since),
        name="demo-traffic",
        daemon=True,
    )
    thread.start()
    return thread
