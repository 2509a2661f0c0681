"""The shipper's retry delays are spread out (full jitter), not merely within their bounds.

Full jitter (AWS, "Exponential Backoff and Jitter"): delay ~ uniform(0, min(cap, base x 2^n)).
Its point is that a fleet of agents which lost the server at the same moment do not all come
back at the same moment. A bounds-only check passes when every delay equals the ceiling (no
jitter at all) or when delays sit in the top half ("equal jitter"): these tests do not.
The random source is seeded, so the draws, and so the outcome, are the same on every run.
"""

from __future__ import annotations

import gzip
import random
import statistics

from collectors.shipper import Shipper
from collectors.transport import HttpTransport

DRAWS = 2000


def shipper(seed: int, base: float = 1.0, cap: float = 300.0) -> Shipper:
    # No spool and no server are needed: backoff_delay is arithmetic on the failure count.
    return Shipper(None, HttpTransport("http://127.0.0.1:9", "tok"), None,
                   backoff_base_s=base, backoff_cap_s=cap, rng=random.Random(seed))


def test_delays_at_the_cap_are_uniform_over_zero_to_the_ceiling():
    s = shipper(seed=20261130)
    delays = [s.backoff_delay(20) for _ in range(DRAWS)]  # 2^20 s > cap: ceiling 300 s
    assert min(delays) >= 0.0 and max(delays) <= 300.0
    # uniform(0, 300): mean 150 s, standard deviation 300 / sqrt(12) = 86.6 s. With 2,000 draws
    # the sample mean's own deviation is 86.6 / sqrt(2000) = 1.9 s, so +-10 s is >5 sigma.
    assert abs(statistics.fmean(delays) - 150.0) < 10.0
    assert abs(statistics.pstdev(delays) - 300 / 12 ** 0.5) < 8.0
    # Each tenth of [0, 300) holds about 200 of the draws (binomial sd 13.4; +-60 is 4.5 sd).
    deciles = [0] * 10
    for d in delays:
        deciles[min(int(d // 30), 9)] += 1
    assert all(140 <= n <= 260 for n in deciles), deciles
    assert len(set(delays)) > DRAWS * 0.99  # not a handful of repeated values


def test_every_step_of_the_exponential_spreads_over_its_whole_range():
    s = shipper(seed=7)
    for failures in range(9):  # ceilings 1, 2, 4, ... 256 s
        ceiling = 2.0 ** failures
        delays = [s.backoff_delay(failures) for _ in range(500)]
        assert max(delays) <= ceiling
        below_half = sum(d < ceiling / 2 for d in delays) / len(delays)
        # Half of a uniform draw falls below the midpoint (binomial sd 2.2 %); "equal jitter"
        # (ceiling/2 + uniform(0, ceiling/2)) would give 0 % and no jitter 0 % as well.
        assert 0.40 < below_half < 0.60, (failures, below_half)
        assert min(delays) < ceiling * 0.05, failures  # some retries come back almost at once


def test_two_agents_failing_together_do_not_retry_in_lockstep():
    a, b = shipper(seed=1), shipper(seed=2)
    pairs = [(a.backoff_delay(10), b.backoff_delay(10)) for _ in range(100)]
    # With the ceiling at 300 s, two independent draws within 1 s of each other happen with
    # probability about 2/300 each time: a handful of 100 at most, not all of them.
    close = sum(abs(x - y) < 1.0 for x, y in pairs)
    assert close < 10, close


def test_retry_after_is_a_floor_on_top_of_the_jitter():
    s = shipper(seed=3)
    delays = [s.backoff_delay(3, retry_after_s=5.0) for _ in range(DRAWS)]  # ceiling 8 s
    assert min(delays) == 5.0  # draws below 5 s are raised to the server's Retry-After
    # uniform(0, 8): 5/8 of the draws fall below 5 s and become exactly 5 s.
    assert abs(sum(d == 5.0 for d in delays) / DRAWS - 5 / 8) < 0.05
    assert max(delays) > 7.5 and len({d for d in delays if d > 5.0}) > 500


def test_default_cap_is_60_s_so_a_returning_server_is_found_within_a_minute():
    from collectors.config import AgentConfig

    assert AgentConfig().backoff_cap == 60.0
    s = Shipper.__init__.__defaults__  # the shipper's own default agrees
    assert 60.0 in s


def test_status_says_retrying_since_and_how_much_is_spooled(tmp_path):
    """`status` while the server is away: "retrying since 14:02, 42 batches spooled", and the
    server's view of the silence says so instead of "AGENT STOPPED SENDING?" (issue 30)."""
    import time as _time

    from collectors.cli import sending_line
    from collectors.cli_host import server_view_lines
    from collectors.spool import Spool

    since = _time.mktime((2026, 12, 4, 14, 2, 0, 0, 0, -1))  # 14:02 local time
    with Spool(tmp_path / "spool.db") as spool:
        ids = [f"b{i}" for i in range(42)]
        for batch_id in ids:
            spool.put(batch_id, b"x", samples=80)
        assert sending_line(spool.status()) == "sending, 42 batches spooled"
        spool.defer("b0", since + 30, "connection refused", now=since)
        spool.defer("b0", since + 90, "connection refused", now=since + 60)  # keeps 14:02
        st = spool.status()
        assert sending_line(st) == ("retrying since 14:02, 42 batches spooled "
                                    "(sent once the server answers)")
        lines = server_view_lines({"silent_s": 600.0}, st.retrying_since)
        assert lines == ["last batch:      600 s ago (this agent has been retrying since "
                         "14:02; its batches are spooled)"]
        spool.ack("b0")  # the server answered: no longer retrying
        assert spool.status().retrying_since is None
        assert sending_line(spool.status()) == "sending, 41 batches spooled"


class _Outage:
    """A transport whose server is down until `up` is set: POSTs get no answer (status None),
    the probe says whether /api/v1/time answers."""

    timeout_s = 5.0

    def __init__(self) -> None:
        self.up = False
        self.posts = 0

    def post(self, path, body, gzipped, timeout_s=None):
        from collectors.transport import Response

        self.posts += 1
        return Response(202, '{"status": "queued"}') if self.up else \
            Response(None, "ConnectionRefusedError: [Errno 111] Connection refused")

    def probe(self, timeout_s: float = 2.0) -> bool:
        return self.up


def test_a_cheap_probe_resumes_sending_within_seconds_of_the_servers_return(tmp_path):
    """After 10 failures the backoff may be 60 s; the probe (every 5 s) finds the server back
    and the spool goes at once: the next step after the return sends, not up to 60 s later."""
    from collectors import shipper as shipper_mod
    from collectors.spool import Spool

    now = [1_000.0]
    transport = _Outage()
    with Spool(tmp_path / "spool.db") as spool:
        spool.put("b1", gzip.compress(b'{"batch_id": "b1", "source": "nvml", "samples": {}}'),
                  samples=8)
        s = Shipper(spool, transport, None, backoff_base_s=1.0, backoff_cap_s=60.0,
                    clock=lambda: now[0], rng=random.Random(3), merge_max_samples=0)
        for _ in range(200):  # the outage: refused attempts and probes, a clock that follows
            wait = s.step()
            assert 0 < wait <= shipper_mod.PROBE_INTERVAL_S  # never a 60 s sleep: a probe first
            now[0] += wait
            if s.failures >= 10:
                break
        assert s.failures >= 10 and s.probes > 0  # the ceiling is now the 60 s cap
        assert spool.depth() == 1
        wait = s.step()
        assert 0 < wait <= shipper_mod.PROBE_INTERVAL_S
        transport.up = True  # the server returns
        now[0] += wait
        posts = transport.posts
        s.step()  # the probe answers, the backoff ends, the head batch goes in this step
        assert transport.posts == posts + 1
        assert spool.depth() == 0 and s.probes >= 1
