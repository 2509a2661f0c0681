"""The shipper against a real local HTTP server: outages, refusals, Retry-After, headers."""

import gzip
import json
import logging
import time

import pytest

from collectors import batch as wire
from collectors.inventory import build_inventory
from collectors.shipper import Shipper
from collectors.sources import GpuInfo, Reading
from collectors.spool import Spool
from collectors.transport import HttpTransport, Response, parse_retry_after

try:
    from tests.support.agent_fakes import FakeServer, free_port
except ImportError:  # tests/ itself on sys.path (pytest's rootdir-less import mode)
    from agent_fakes import FakeServer, free_port

GPUS = [
    GpuInfo(0, "GPU-aaaa", "Fake GPU", 700.0, 81559),
    GpuInfo(1, "GPU-bbbb", "Fake GPU", 700.0, 81559),
]


@pytest.fixture
def spool(tmp_path):
    s = Spool(tmp_path / "spool.db")
    yield s
    s.close()


@pytest.fixture
def server():
    srv = FakeServer().start()
    yield srv
    srv.stop()


def spool_batches(spool: Spool, k: int, per: int = 4) -> list[str]:
    """k batches of ``per`` samples each, timestamps increasing across batches."""
    ids = []
    for b in range(k):
        buf = wire.SampleBuffer()
        for j in range(per):
            ts = 1_764_480_000.0 + b * per + j
            buf.append(
                ts, j % 2, Reading(50.0, 1.0, 200.0, 1000 * j, 60.0, 1400.0), 200.0, "counter"
            )
        doc = wire.build_batch(buf.columns(), "nvml")
        spool.put(doc["batch_id"], wire.encode(doc), per)
        ids.append(doc["batch_id"])
    return ids


def make_shipper(spool, url, inventory=True, **kw) -> Shipper:
    return Shipper(
        spool,
        HttpTransport(url, "tok-123", timeout_s=2.0),
        build_inventory(GPUS, hostname="host-1") if inventory else None,
        backoff_base_s=kw.pop("base", 0.01),
        backoff_cap_s=kw.pop("cap", 0.05),
        # One POST per spooled batch: these tests follow single batches through retries and
        # refusals; merging a backlog is tests/agent/test_shipper_merge.py's.
        merge_max_samples=kw.pop("merge", 0),
        **kw,
    )


def drain(shipper: Shipper, spool: Spool, timeout: float = 10.0) -> None:
    """Run the shipper's thread until the spool is empty."""
    shipper.start()
    deadline = time.monotonic() + timeout
    while spool.depth() and time.monotonic() < deadline:
        time.sleep(0.01)
    shipper.stop()
    assert spool.depth() == 0, "spool not drained"


def test_outage_then_recovery_delivers_every_sample_once_in_order(spool):
    ids = spool_batches(spool, 5)
    port = free_port()
    shipper = make_shipper(spool, f"http://127.0.0.1:{port}", inventory=False)
    # Server down: connection refused. Nothing leaves the spool.
    for _ in range(3):
        shipper.step()
        time.sleep(0.06)
    assert spool.depth() == 5
    assert spool.head().attempts == 3
    assert shipper.failures == 3
    # Server up, but overloaded for two requests.
    server = FakeServer(port=port, script=[(503, {}, {"error": "busy"})] * 2).start()
    try:
        drain(shipper, spool)
    finally:
        server.stop()
    assert [d["batch_id"] for d in server.accepted] == ids
    assert server.duplicates == 0
    keys = server.sample_keys()
    assert len(keys) == len(set(keys)) == 5 * 4
    assert [ts for _, ts in keys] == sorted(ts for _, ts in keys)
    # Each batch was sent once more than the retries it took; the 503s hit the first batch.
    sent = [r.doc["batch_id"] for r in server.requests]
    assert sent == [ids[0]] * 3 + ids[1:]


def test_inventory_is_registered_before_samples(spool, server):
    spool_batches(spool, 2)
    drain(make_shipper(spool, server.url), spool)
    first = server.requests[0]
    assert first.path == "/api/v1/inventory"
    assert first.doc == {
        "agent_version": "0.1.0",
        "hostname": "host-1",
        "gpus": [
            {
                "index": 0,
                "uuid": "GPU-aaaa",
                "name": "Fake GPU",
                "power_limit_w": 700.0,
                "memory_total_mib": 81559,
                "max_sm_clock_mhz": None,
                "max_mem_clock_mhz": None,
            },
            {
                "index": 1,
                "uuid": "GPU-bbbb",
                "name": "Fake GPU",
                "power_limit_w": 700.0,
                "memory_total_mib": 81559,
                "max_sm_clock_mhz": None,
                "max_mem_clock_mhz": None,
            },
        ],
    }
    assert [r.path for r in server.requests[1:]] == ["/api/v1/samples"] * 2


def test_wire_headers_and_gzip_body(spool, server):
    (batch_id,) = spool_batches(spool, 1)
    before = time.time()
    drain(make_shipper(spool, server.url), spool)
    req = server.requests[-1]
    assert req.headers["Authorization"] == "Bearer tok-123"
    assert req.headers["Content-Type"] == "application/json"
    assert req.headers["Content-Encoding"] == "gzip"
    doc = json.loads(gzip.decompress(req.raw).decode("utf-8"))
    assert set(doc) == {"batch_id", "agent_version", "sent_at", "source", "samples", "spool"}
    # The backlog when this batch went out, itself included (issue 4: spool lag on the host list).
    assert doc["spool"]["depth"] == 1 and doc["spool"]["oldest_age_s"] >= 0
    assert doc["batch_id"] == batch_id
    assert doc["agent_version"] == "0.1.0"
    assert doc["source"] == "nvml"
    assert doc["sent_at"] >= before  # stamped when sent, not when spooled
    assert list(doc["samples"]) == [
        "ts",
        "gpu_index",
        "util_pct",
        "mem_used_mib",
        "power_w",
        "energy_mj",
        "energy_j",
        "energy_method",
        "temp_c",
        "sm_clock_mhz",
        "mem_util_pct",
        "mem_clock_mhz",
        "pcie_tx_kib_s",
        "pcie_rx_kib_s",
        "throttle_reasons",
        "power_limit_w",
    ]
    assert {len(col) for col in doc["samples"].values()} == {4}
    assert doc["samples"]["energy_method"] == ["counter"] * 4


def test_422_dead_letters_the_batch_and_the_next_one_still_goes(spool):
    error = {"error": "invalid", "field": "samples.power_w[3]", "message": "must be >= 0"}
    server = FakeServer(script=[(422, {}, error)]).start()
    try:
        ids = spool_batches(spool, 2)
        drain(make_shipper(spool, server.url), spool)
    finally:
        server.stop()
    assert [d["batch_id"] for d in server.accepted] == [ids[1]]
    (rejected,) = spool.rejected()
    assert rejected["batch_id"] == ids[0]
    assert rejected["http_status"] == 422
    assert json.loads(rejected["error_body"]) == error


def test_422_on_gpu_index_registers_again_and_resends(spool):
    error = {"error": "unknown_gpu", "field": "samples.gpu_index[0]", "message": "no GPU 0"}
    server = FakeServer(script=[(422, {}, error)]).start()
    try:
        ids = spool_batches(spool, 1)
        drain(make_shipper(spool, server.url), spool)
    finally:
        server.stop()
    assert [r.path for r in server.requests] == [
        "/api/v1/inventory",
        "/api/v1/samples",
        "/api/v1/inventory",
        "/api/v1/samples",
    ]
    assert [d["batch_id"] for d in server.accepted] == ids
    assert spool.rejected() == []


def test_422_on_gpu_index_twice_is_dead_lettered(spool):
    error = {"error": "unknown_gpu", "field": "samples.gpu_index[0]", "message": "no GPU 0"}
    server = FakeServer(script=[(422, {}, error)] * 2).start()
    try:
        spool_batches(spool, 1)
        drain(make_shipper(spool, server.url), spool)
    finally:
        server.stop()
    assert len(spool.rejected()) == 1
    assert len(server.inventory_posts()) == 2


def test_retry_after_is_honoured(spool):
    server = FakeServer(script=[(429, {"Retry-After": "1"}, {"error": "rate_limited"})]).start()
    try:
        spool_batches(spool, 1)
        drain(make_shipper(spool, server.url), spool)
    finally:
        server.stop()
    samples = [r for r in server.requests if r.path == "/api/v1/samples"]
    assert len(samples) == 2
    # The retry waited for Retry-After (1 s) although the backoff cap is 0.05 s.
    gap = samples[1].doc["sent_at"] - samples[0].doc["sent_at"]
    assert gap >= 0.95


def test_token_rejected_keeps_the_batch_and_backs_off(spool, caplog):
    server = FakeServer(script=[(401, {}, {"error": "bad_token"})] * 3).start()
    try:
        ids = spool_batches(spool, 1)
        shipper = make_shipper(spool, server.url, inventory=False)
        with caplog.at_level(logging.ERROR):
            delay = shipper.step()
        assert 0 <= delay <= 0.01
        assert spool.batch_ids() == ids
        assert "token rejected" in caplog.text
        drain(shipper, spool)
    finally:
        server.stop()
    assert [d["batch_id"] for d in server.accepted] == ids


def test_thread_survives_an_exception(spool, server):
    class Boom(HttpTransport):
        calls = 0

        def post(self, *args, **kwargs):
            Boom.calls += 1
            if Boom.calls == 1:
                raise RuntimeError("bug in a transport")
            return super().post(*args, **kwargs)

    ids = spool_batches(spool, 1)
    shipper = Shipper(spool, Boom(server.url, "t"), None, backoff_base_s=0.01)
    import collectors.shipper as shipper_mod

    old = shipper_mod.IDLE_WAIT_S
    shipper_mod.IDLE_WAIT_S = 0.05
    try:
        drain(shipper, spool)
    finally:
        shipper_mod.IDLE_WAIT_S = old
    assert [d["batch_id"] for d in server.accepted] == ids


def test_flush_gives_up_fast_when_server_is_down(spool):
    spool_batches(spool, 2)
    shipper = make_shipper(
        spool, f"http://127.0.0.1:{free_port()}", inventory=False, base=10.0, cap=10.0
    )
    shipper.start()
    time.sleep(0.1)  # first attempt fails and backs off for up to 10 s
    started = time.monotonic()
    assert shipper.flush(5.0) is False
    assert time.monotonic() - started < 1.0
    shipper.stop()
    assert spool.depth() == 2


def test_backoff_is_full_jitter_capped_exponential():
    shipper = make_shipper(None, "http://x", base=1.0, cap=300.0)
    for failures, ceiling in [(0, 1.0), (3, 8.0), (20, 300.0)]:
        delays = [shipper.backoff_delay(failures) for _ in range(200)]
        assert min(delays) >= 0 and max(delays) <= ceiling
        assert max(delays) > ceiling / 2  # spread over the whole range
    assert shipper.backoff_delay(0, retry_after_s=30.0) >= 30.0


def test_response_classification_and_retry_after_parsing():
    assert Response(202, "").outcome == "delivered"
    assert Response(403, "").outcome == "auth"
    for status in (400, 413, 422):
        assert Response(status, "").outcome == "permanent"
    for status in (408, 429, 500, 503, None):
        assert Response(status, "").outcome == "retry"
    assert parse_retry_after("7") == 7.0
    assert parse_retry_after("Wed, 21 Oct 2015 07:28:00 GMT", now=1445412470.0) == 10.0
    assert parse_retry_after("soon") is None
