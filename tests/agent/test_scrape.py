"""Inference-server scraping: real Triton and vLLM /metrics text (tests/data/) served over HTTP.

Every expected figure below is worked out by hand from the fixture files; the comments show
the subtraction.
"""

from __future__ import annotations

import http.server
import math
import threading
import time

import pytest

from collectors import batch as wire
from collectors import prometheus as prom
from collectors.scrape import (
    INFERENCE_PATH,
    ScrapeChannel,
    TargetError,
    TargetScraper,
    counter_delta,
    http_fetch,
    parse_target,
)
from collectors.shipper import Shipper
from collectors.spool import Spool
from collectors.transport import HttpTransport
from tests.support import DATA, ROOT

try:
    from tests.support.agent_fakes import FakeServer
except ImportError:  # tests/ itself on sys.path
    from agent_fakes import FakeServer

VLLM_LE = [0.3, 0.5, 0.8, 1.0, 1.5, 2.0, 2.5, 5.0, 10.0, 15.0, 20.0, 30.0, 40.0, 50.0, 60.0,
           120.0, 240.0, 480.0, 960.0, 1920.0, 7680.0]


class MetricsServer:
    """Serves whichever fixture file is current at /metrics, like a live inference server."""

    def __init__(self) -> None:
        self.body = ""
        self.status = 200
        self.cut_at: int | None = None  # send only this many bytes of the body
        self.content_length = True
        server = self

        class Handler(http.server.BaseHTTPRequestHandler):
            def log_message(self, *args: object) -> None:
                pass

            def do_GET(self) -> None:
                data = server.body.encode()
                self.send_response(server.status)
                self.send_header("Content-Type", "text/plain; version=0.0.4; charset=utf-8")
                if server.content_length:
                    self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                # A connection dropped mid-page: fewer bytes than the Content-Length promised.
                self.wfile.write(data if server.cut_at is None else data[:server.cut_at])
                self.close_connection = True

        self.httpd = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        threading.Thread(target=self.httpd.serve_forever, daemon=True).start()
        self.url = f"http://127.0.0.1:{self.httpd.server_address[1]}/metrics"

    def serve(self, fixture: str) -> None:
        self.body = (DATA / fixture).read_text()

    def close(self) -> None:
        self.httpd.shutdown()
        self.httpd.server_close()


@pytest.fixture
def metrics():
    server = MetricsServer()
    yield server
    server.close()


def scraper_for(server: MetricsServer, kind: str, **extra) -> TargetScraper:
    target = parse_target({"url": server.url, "kind": kind, "workload": "wl", **extra}, "scrape[0]")
    return TargetScraper(target, http_fetch, timeout_s=5.0)


def run(scraper: TargetScraper, server: MetricsServer, *fixtures: str) -> list[dict | None]:
    out = []
    for i, fixture in enumerate(fixtures):
        server.serve(fixture)
        out.append(scraper.scrape(end=1_764_480_000.0 + 15 * i))
    return out


# --- the exposition parser -------------------------------------------------------------------


def test_parser_reads_labels_escapes_special_values_and_timestamps():
    text = (
        "# HELP x_total a counter\n"
        "# TYPE x_total counter\n"
        'x_total{path="/a\\"b\\\\c\\nd",code="200"} 12 1764480000000\n'
        "x_total 3.5e3\n"
        'vllm:y{le="+Inf"} +Inf\n'
        "z NaN\n"
        "# EOF\n"
    )
    expo = prom.parse(text)
    assert expo.types == {"x_total": "counter"}
    assert expo.series("x_total") == {
        (("code", "200"), ("path", '/a"b\\c\nd')): 12.0,  # labels sorted, escapes undone
        (): 3500.0,
    }
    assert expo.series("vllm:y") == {(("le", "+Inf"),): math.inf}
    assert math.isnan(expo.series("z")[()])


@pytest.mark.parametrize("line", [
    "x_total",  # no value
    'x_total{a="1"',  # unterminated labels
    'x_total{a=1} 2',  # unquoted value
    "x_total abc",  # not a number
    'x_total{a="1"} 1\nx_total{a="1"} 2',  # the same series twice
])
def test_parser_refuses_malformed_text(line):
    with pytest.raises(prom.ParseError):
        prom.parse(line)


def test_counter_delta_handles_restarts_and_new_series():
    a, b = (("model", "a"),), (("model", "b"),)
    assert counter_delta({a: 10, b: 5}, {a: 15, b: 9}) == 9  # (15-10) + (9-5)
    assert counter_delta({a: 10, b: 5}, {a: 3, b: 9}) == 7  # a restarted: 3 + (9-5)
    assert counter_delta({a: 10}, {a: 10, b: 4}) == 4  # b is new: counted from zero


# --- Triton --------------------------------------------------------------------------------


def test_triton_counters_deltas_reset_and_mean_latency(metrics):
    s = scraper_for(metrics, "triton")
    first, second, third = run(s, metrics, "triton_counters_1.txt", "triton_counters_2.txt",
                               "triton_counters_3_restarted.txt")
    assert first is None  # the first scrape is the baseline
    # Both models (no label filter):
    #   requests = nv_inference_count: (12000-9600) + (460-400) = 2460
    #   success: (1500-1200) + (460-400) = 360; failure: (5-3) + (1-0) = 3
    #   duration: (22800000-18000000) + (9200000-8000000) = 6000000 us over 360 requests
    #   queue: (1500000-1200000) + (345000-300000) = 345000 us; compute input (1140000-900000)
    #   + (460000-400000) = 300000; infer 2400000 + 600000; output 192000 + 48000
    #   nv_energy_consumption (one GPU): 1868150.2 - 1843392.5 = 24757.7 J
    assert second == {
        "workload": "wl", "start": 1_764_480_000.0, "end": 1_764_480_015.0, "requests": 2460,
        "success": 360, "failure": 3, "latency": {"unit": "us", "sum": 6_000_000.0, "count": 360},
        "timings": {
            "queue": {"unit": "us", "sum": 345_000.0, "count": 360},
            "compute_input": {"unit": "us", "sum": 300_000.0, "count": 360},
            "compute_infer": {"unit": "us", "sum": 3_000_000.0, "count": 360},
            "compute_output": {"unit": "us", "sum": 240_000.0, "count": 360},
        },
        "server_energy_j": pytest.approx(24_757.7),
    }
    assert "le" not in second["latency"]  # counters give a mean only: no invented buckets
    # Triton restarted: every counter is below the previous scrape, so the window counts
    # what it counted since the restart: 800 + 20 inferences, 100 + 20 successes, 0 failures.
    assert third["start"] == 1_764_480_015.0  # Triton exposes no process start time
    assert (third["requests"], third["success"], third["failure"]) == (820, 120, 0)
    assert third["latency"] == {"unit": "us", "sum": 1_900_000.0, "count": 120}
    assert third["timings"]["queue"] == {"unit": "us", "sum": 105_000.0, "count": 120}
    assert third["server_energy_j"] == pytest.approx(6190.4)


def test_triton_label_filter_keeps_one_model(metrics):
    s = scraper_for(metrics, "triton", labels={"model": "resnet50"})
    _, second = run(s, metrics, "triton_counters_1.txt", "triton_counters_2.txt")
    assert second["requests"] == 2400  # 12000 - 9600: batches of 8 count 8 inferences
    assert (second["success"], second["failure"]) == (300, 2)
    assert second["latency"] == {"unit": "us", "sum": 4_800_000.0, "count": 300}  # 16 ms mean
    assert second["timings"]["queue"] == {"unit": "us", "sum": 300_000.0, "count": 300}


def test_triton_first_response_is_time_to_first_response_not_request_latency(metrics):
    s = scraper_for(metrics, "triton")
    _, second = run(s, metrics, "triton_histogram_1.txt", "triton_histogram_2.txt")
    assert second["requests"] == 53  # 90 - 37
    # Failures carry a reason label in Triton 24.x: (1-0) BACKEND + (2-0) REJECTED.
    assert (second["success"], second["failure"]) == (53, 3)
    # Request latency from the duration counter: 30171000 - 10771000 us over 53 requests.
    assert second["latency"] == {"unit": "us", "sum": 19_400_000.0, "count": 53}
    # nv_inference_first_response_histogram_ms, cumulative deltas per bound:
    # le=100: 20-8, 500: 50-20, 2000: 85-35, 5000: 89-37, +Inf: 90-37; sum 30171-10771 ms.
    assert second["timings"]["first_response"] == {
        "unit": "ms", "le": [100.0, 500.0, 2000.0, 5000.0], "counts": [12, 30, 50, 52, 53],
        "cumulative": True, "sum": 19400.0,
    }


def test_triton_streaming_model_latency_queue_compute_and_energy(metrics):
    """Issue 8 item 2: a streaming model whose requests take 1,250 ms on average showed
    132.75 ms, its time to first response."""
    s = scraper_for(metrics, "triton", labels={"model": "llama_stream"})
    _, w = run(s, metrics, "triton_stream_1.txt", "triton_stream_2.txt")
    # success 480 - 400 = 80; request duration 600000000 - 500000000 = 100,000,000 us:
    # 100,000,000 / 80 = 1,250,000 us = 1,250 ms per request.
    assert w["latency"] == {"unit": "us", "sum": 100_000_000.0, "count": 80}
    assert w["latency"]["sum"] / w["latency"]["count"] / 1000 == 1250.0
    t = w["timings"]
    # queue 24000000 - 20000000 = 4,000,000 us / 80 = 50 ms; compute input 800,000 / 80 =
    # 10 ms; infer 566400000 - 472000000 = 94,400,000 / 80 = 1,180 ms; output 400,000 / 80 = 5
    assert t["queue"] == {"unit": "us", "sum": 4_000_000.0, "count": 80}
    assert t["compute_input"]["sum"] == 800_000.0
    assert t["compute_infer"]["sum"] == 94_400_000.0
    assert t["compute_output"]["sum"] == 400_000.0
    # First response: 63720 - 53100 = 10,620 ms over 80 = 132.75 ms: shown as that, not as
    # the request latency. Buckets 180-150, 440-390, 480-400, ...
    assert t["first_response"]["counts"] == [30, 50, 80, 80, 80]
    assert t["first_response"]["sum"] / t["first_response"]["counts"][-1] == 132.75
    # nv_energy_consumption on two GPUs: (2448087.125 - 2412087.125) + (1632058.5 - 1608058.5)
    assert w["server_energy_j"] == 60_000.0


# --- vLLM ----------------------------------------------------------------------------------


def test_vllm_deltas_tokens_histogram_and_restart(metrics):
    s = scraper_for(metrics, "vllm", labels={"model_name": "meta-llama/Llama-3.1-8B-Instruct"})
    first, second, third = run(s, metrics, "vllm_metrics_1.txt", "vllm_metrics_2.txt",
                               "vllm_metrics_3_restarted.txt")
    assert first is None
    # finished_reason stop +60 (180-120), length +12 (42-30), abort +3 (5-2)
    assert (second["requests"], second["success"], second["failure"]) == (75, 72, 3)
    assert second["tokens"] == 24000  # generation tokens 69000 - 45000
    assert second["prompt_tokens"] == 31500  # prompt tokens 91500 - 60000
    # Time to first token: only the +Inf bucket moved in this page (152 -> 227).
    ttft = second["timings"]["first_token"]
    assert (ttft["unit"], ttft["counts"][-1], ttft["sum"]) == ("s", 75, pytest.approx(4.48))
    lat = second["latency"]
    assert (lat["unit"], lat["cumulative"], lat["le"]) == ("s", True, VLLM_LE)
    # Cumulative bucket deltas, e.g. le=1.0: 35-25 = 10, le=5.0: 205-140 = 65; 20 s and up: 75.
    assert lat["counts"] == [0, 1, 4, 10, 25, 40, 50, 65, 72, 74] + [75] * 11 + [75]
    assert lat["sum"] == pytest.approx(209.5)  # 620.0 - 410.5 s
    # vLLM restarted: counters fell (abort 5 -> 0), so the new values are the window's.
    assert (third["requests"], third["success"], third["failure"]) == (6, 6, 0)
    assert third["tokens"] == 1500
    assert third["latency"]["counts"] == [0, 0, 1, 2, 4, 5, 6] + [6] * 14 + [6]
    assert third["latency"]["sum"] == 9.0


def test_custom_target_uses_configured_names(metrics):
    s = scraper_for(metrics, "custom", requests="vllm:prompt_tokens_total",
                    latency_histogram="vllm:time_to_first_token_seconds", latency_unit="s")
    _, second = run(s, metrics, "vllm_metrics_1.txt", "vllm_metrics_2.txt")
    assert second["requests"] == 31500  # 91500 - 60000
    assert "success" not in second and "tokens" not in second
    assert second["latency"]["counts"][-1] == 75  # ttft count 227 - 152
    assert second["latency"]["sum"] == pytest.approx(13.6 - 9.12)


def test_a_failed_scrape_sends_nothing_and_the_next_covers_the_span(metrics):
    s = scraper_for(metrics, "vllm")
    metrics.serve("vllm_metrics_1.txt")
    assert s.scrape(1.0) is None
    metrics.body = "this is not { prometheus"
    assert s.scrape(2.0) is None  # unparseable: dropped whole, baseline kept
    metrics.serve("vllm_metrics_2.txt")
    assert s.scrape(3.0)["requests"] == 75  # 1 -> 2 as if the bad scrape never happened


@pytest.mark.parametrize("doc, message", [
    ({"url": "ftp://x", "kind": "vllm", "workload": "w"}, "url"),
    ({"url": "http://x", "kind": "tgi", "workload": "w"}, "kind"),
    ({"url": "http://x", "kind": "vllm"}, "workload"),
    ({"url": "http://x", "kind": "custom", "workload": "w"}, "requests"),
    ({"url": "http://x", "kind": "vllm", "workload": "w", "requests": "a"}, "custom"),
    ({"url": "http://x", "kind": "vllm", "workload": "w", "labels": {"m": 1}}, "labels"),
    ({"url": "http://x", "kind": "vllm", "workload": "w", "colour": "red"}, "colour"),
])
def test_bad_targets_are_config_errors(doc, message):
    with pytest.raises(TargetError, match=message):
        parse_target(doc, "scrape[0]")


def test_agent_config_reads_scrape_tables(tmp_path):
    from collectors.config import ConfigError, load_config

    path = tmp_path / "agent.toml"
    path.write_text(
        'scrape_interval = 5\n'
        '[[scrape]]\nurl = "http://127.0.0.1:8002/metrics"\nkind = "triton"\n'
        'workload = "resnet"\nlabels = { model = "resnet50" }\n'
        '[[scrape]]\nurl = "http://127.0.0.1:8000/metrics"\nkind = "vllm"\nworkload = "chat"\n'
    )
    config = load_config({}, environ={}, config_file=str(path))
    assert [(t.kind, t.workload, t.labels) for t in config.scrape] == [
        ("triton", "resnet", (("model", "resnet50"),)), ("vllm", "chat", ())]
    assert config.scrape_interval == 5.0
    path.write_text('[[scrape]]\nurl = "http://x"\nkind = "nope"\nworkload = "w"\n')
    with pytest.raises(ConfigError, match="kind"):
        load_config({}, environ={}, config_file=str(path))


# --- through the spool and the shipper to /api/v1/inference ----------------------------------


def test_windows_are_spooled_and_shipped_to_the_inference_endpoint(metrics, tmp_path):
    target = parse_target({"url": metrics.url, "kind": "vllm", "workload": "chat"}, "s")
    clock = iter([100.0, 115.0, 130.0])
    channel = ScrapeChannel([target], interval_s=15, clock=lambda: next(clock))
    for fixture in ("vllm_metrics_1.txt", "vllm_metrics_2.txt", "vllm_metrics_3_restarted.txt"):
        metrics.serve(fixture)
        channel.scrape_all()
    spool = Spool(tmp_path / "spool.db")
    assert channel.seal(spool) == 1
    assert channel.seal(spool) == 0  # nothing new
    head = spool.head()
    assert head.path == INFERENCE_PATH and head.samples == 2
    doc = wire.decode(head.payload)
    assert set(doc) == {"batch_id", "sent_at", "windows"}  # all the endpoint accepts
    assert [(w["start"], w["end"], w["requests"]) for w in doc["windows"]] == [
        (100.0, 115.0, 75), (115.0, 130.0, 6)]

    server = FakeServer(script=[(202, {}, {"status": "stored"})]).start()
    try:
        shipper = Shipper(spool, HttpTransport(server.url, "tok"), None)
        shipper.step()
    finally:
        server.stop()
        spool.close()
    (req,) = server.requests
    assert req.path == "/api/v1/inference"
    assert req.doc["windows"] == doc["windows"] and "spool" not in req.doc


@pytest.mark.django_db
def test_server_accepts_scraped_histogram_windows(metrics, team):
    """The vLLM window goes through the server's own validation and re-bucketing."""
    from greenops.kpis import histogram, inference
    from greenops.workloads.models import Workload

    Workload.objects.create(team=team, name="Chat", slug="wl")
    s = scraper_for(metrics, "vllm")
    _, window = run(s, metrics, "vllm_metrics_1.txt", "vllm_metrics_2.txt")
    window["end"] = time.time()
    window["start"] = window["end"] - 15
    _, (row,), refused = inference.parse_windows(
        {"batch_id": "3f0b1a1e-7a53-4c36-9d0e-5c1f1e0b8a11", "windows": [window]}, team,
        now_s=window["end"])
    assert refused == []
    assert (row.requests, row.success, row.failure, row.tokens) == (75, 72, 3, 24000)
    assert row.latency_sum_ms == pytest.approx(209_500.0)
    assert histogram.total(row.latency_buckets) == 75
    # Prometheus' histogram_quantile over vLLM's own buckets (cumulative deltas 0, 1, 4, 10,
    # 25, 40, 50, 65, 72, 74, 75 at 0.3 ... 20 s):
    # p99: rank 0.99 x 75 = 74.25 -> (15, 20] s (74 -> 75): 15 + 5 x 0.25/1 = 16.25 s.
    assert histogram.quantile_ms(row.latency_buckets, 0.99) == pytest.approx(16_250.0)
    # p50: rank 37.5 -> (1.5, 2.0] s (25 -> 40): 1.5 + 0.5 x 12.5/15 = 1.91667 s.
    assert histogram.quantile_ms(row.latency_buckets, 0.50) == pytest.approx(1916.6666667)
    # Time to first token travels as its own histogram, 75 observations.
    assert histogram.total(row.timings["first_token"]["hist"]) == 75
    assert row.prompt_tokens == 31500


@pytest.mark.django_db
def test_server_accepts_triton_mean_latency_windows(metrics, team):
    from greenops.kpis import inference
    from greenops.workloads.models import Workload

    Workload.objects.create(team=team, name="Ranker", slug="wl")
    s = scraper_for(metrics, "triton")
    _, window = run(s, metrics, "triton_counters_1.txt", "triton_counters_2.txt")
    window["end"] = time.time()
    window["start"] = window["end"] - 15
    _, (row,), _ = inference.parse_windows({"batch_id": "0d4c3b7e-2f7a-4a8e-9b61-0c2e5d7f9a10",
                                            "windows": [window]}, team, now_s=window["end"])
    assert row.latency_sum_ms == pytest.approx(6000.0)  # 6,000,000 us
    assert row.latency_n == window["latency"]["count"] and row.latency_buckets == {}
    assert row.timings["queue"] == {"sum_ms": 345.0, "n": 360, "hist": {}}  # 345,000 us
    assert row.server_energy_j == pytest.approx(24_757.7)


def test_a_real_agent_process_scrapes_and_ships_windows(tmp_path):
    """The whole path: config file -> agent process -> scrape thread -> spool -> server."""
    import os
    import signal
    import subprocess
    import sys

    metrics = MetricsServer()
    served = iter(["vllm_metrics_1.txt", "vllm_metrics_2.txt"])
    original = metrics.serve

    def next_fixture_per_get() -> None:  # every GET advances, then stays on the last file
        original(next(served, "vllm_metrics_2.txt"))

    class Advancing(http.server.BaseHTTPRequestHandler):
        def log_message(self, *args: object) -> None:
            pass

        def do_GET(self) -> None:
            next_fixture_per_get()
            data = metrics.body.encode()
            self.send_response(200)
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

    metrics.httpd.RequestHandlerClass = Advancing
    server = FakeServer(script=[(202, {}, {"status": "stored"})] * 500).start()
    config = tmp_path / "agent.toml"
    config.write_text(
        'host_energy = "off"\nscrape_interval = 0.2\n'
        f'[[scrape]]\nurl = "{metrics.url}"\nkind = "vllm"\nworkload = "chat"\n'
    )
    env = {k: v for k, v in os.environ.items() if not k.startswith("GREENOPS_")}
    env.update(AGENT_FAKES_GPUS="1", GREENOPS_TOKEN="tok")
    repo = ROOT
    proc = subprocess.Popen(
        [sys.executable, "-m", "collectors.cli", "run", "--server", server.url, "--config",
         str(config), "--nvml-lib", "tests.support.agent_fakes", "--spool", str(tmp_path / "s.db"),
         "--interval", "0.05", "--batch-seconds", "0.3"],
        cwd=repo, env=env, stderr=subprocess.PIPE, text=True)
    try:
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline and not any(
            r.path == INFERENCE_PATH and any(w["requests"] for w in r.doc["windows"])
            for r in list(server.requests)
        ):
            time.sleep(0.05)
        proc.send_signal(signal.SIGTERM)
        _, stderr = proc.communicate(timeout=15)
    finally:
        server.stop()
        metrics.close()
    assert proc.returncode == 0, stderr
    windows = [w for r in server.requests if r.path == INFERENCE_PATH for w in r.doc["windows"]]
    assert sum(w["requests"] for w in windows) == 75  # scrape 1 -> 2, then nothing new
    assert all(w["workload"] == "chat" for w in windows)
    assert any(r.path == "/api/v1/samples" for r in server.requests)


def test_a_spool_from_before_endpoints_keeps_shipping_its_batches_as_samples(tmp_path):
    import sqlite3

    path = tmp_path / "old.db"
    db = sqlite3.connect(path)
    db.executescript(  # the schema of agent 0.1.0, before batches knew their endpoint
        "CREATE TABLE batches (seq INTEGER PRIMARY KEY AUTOINCREMENT, batch_id TEXT NOT NULL "
        "UNIQUE, created_at REAL NOT NULL, samples INTEGER NOT NULL, payload BLOB NOT NULL, "
        "attempts INTEGER NOT NULL DEFAULT 0, next_attempt_at REAL NOT NULL DEFAULT 0, "
        "last_error TEXT);"
        "INSERT INTO batches (batch_id, created_at, samples, payload) VALUES ('b1', 1, 2, x'00');"
    )
    db.commit()
    db.close()
    with Spool(path) as spool:
        assert spool.head().path == "/api/v1/samples"
        spool.put("b2", b"\x01", 1, path=INFERENCE_PATH)
        spool.reject("b2", 422, "{}")
        assert spool.rejected()[0]["path"] == INFERENCE_PATH


def test_a_histogram_with_a_bad_bound_is_a_failed_scrape_not_a_crash(metrics):
    s = scraper_for(metrics, "vllm")
    metrics.serve("vllm_metrics_1.txt")
    assert s.scrape(1.0) is None
    metrics.body = metrics.body.replace('le="0.3"', 'le="NaN"')
    assert s.scrape(2.0) is None  # dropped whole; the baseline stays scrape 1
    metrics.serve("vllm_metrics_2.txt")
    assert s.scrape(3.0)["requests"] == 75


# --- bad scrapes are not restarts (issue 8 item 5) -------------------------------------------

START = ("# HELP process_start_time_seconds Start time of the process since unix epoch in "
         "seconds.\n# TYPE process_start_time_seconds gauge\nprocess_start_time_seconds {}\n")


def test_a_response_shorter_than_its_content_length_is_a_failed_scrape(metrics):
    s = scraper_for(metrics, "vllm")
    metrics.serve("vllm_metrics_1.txt")
    assert s.scrape(1.0) is None
    # The page of scrape 2, cut inside the value "180.0" of finished_reason="stop": what is
    # left parses (stop = 18), and was taken for a restart before.
    metrics.serve("vllm_metrics_2.txt")
    stop = metrics.body.index('finished_reason="stop"')
    metrics.cut_at = len(metrics.body[:metrics.body.index(" 180.0", stop) + 3].encode())
    assert s.scrape(2.0) is None
    metrics.cut_at = None
    w = s.scrape(3.0)
    # The base is still scrape 1: (180-120) + (42-30) + (5-2) = 75, from 1.0 to 3.0.
    assert (w["start"], w["end"], w["requests"]) == (1.0, 3.0, 75)


def test_a_page_without_its_final_line_feed_is_cut_short(metrics):
    metrics.content_length = False  # no Content-Length: the body ends where the server stopped
    s = scraper_for(metrics, "vllm")
    metrics.serve("vllm_metrics_1.txt")
    assert s.scrape(1.0) is None
    metrics.serve("vllm_metrics_2.txt")
    metrics.body = metrics.body[: metrics.body.index(" 180.0") + 3]
    with pytest.raises(ValueError, match="line feed"):
        http_fetch(metrics.url, 5.0)
    assert s.scrape(2.0) is None
    metrics.serve("vllm_metrics_2.txt")
    assert s.scrape(3.0)["requests"] == 75


def test_restart_is_recognised_from_the_process_start_time(metrics):
    s = scraper_for(metrics, "vllm")
    metrics.body = (DATA / "vllm_metrics_1.txt").read_text() + START.format("1.7644752e+09")
    assert s.scrape(1_764_480_000.0) is None
    # A new process that has already counted more than the old one: no counter fell, but the
    # start time moved, so everything it shows is new: 180 + 42 + 5 = 227 requests.
    metrics.body = (DATA / "vllm_metrics_2.txt").read_text() + START.format("1.76448001e+09")
    w = s.scrape(1_764_480_015.0)
    assert (w["requests"], w["success"], w["failure"]) == (227, 222, 5)
    assert w["start"] == 1_764_480_010.0  # the window starts when the new process did
    assert w["tokens"] == 69000


def test_counters_falling_in_the_same_process_are_a_bad_scrape(metrics):
    s = scraper_for(metrics, "vllm")
    metrics.body = (DATA / "vllm_metrics_2.txt").read_text() + START.format("1.7644752e+09")
    assert s.scrape(1.0) is None
    # Lower counters but the same start time: not a restart; nothing is sent.
    metrics.body = (DATA / "vllm_metrics_1.txt").read_text() + START.format("1.7644752e+09")
    assert s.scrape(2.0) is None
    assert s.previous.at == 1.0  # the base stays the last good scrape


def test_one_counter_falling_among_others_is_a_bad_scrape_not_a_restart(metrics):
    s = scraper_for(metrics, "triton")
    metrics.serve("triton_counters_1.txt")
    assert s.scrape(1.0) is None
    # bert_base's success counter reads 40 (was 400) while everything else went up.
    metrics.serve("triton_counters_2.txt")
    metrics.body = metrics.body.replace(
        'nv_inference_request_success{model="bert_base",version="1"} 460',
        'nv_inference_request_success{model="bert_base",version="1"} 40')
    assert s.scrape(2.0) is None
    metrics.serve("triton_counters_2.txt")
    w = s.scrape(3.0)
    assert (w["start"], w["requests"], w["success"]) == (1.0, 2460, 360)


def test_a_histogram_with_some_buckets_falling_is_a_bad_scrape(metrics):
    s = scraper_for(metrics, "vllm")
    metrics.serve("vllm_metrics_1.txt")
    assert s.scrape(1.0) is None
    # The e2e le="1.0" bucket reads 20 (scrape 1 had 25) while the others and every counter
    # rose: not a restart, a bad scrape.
    metrics.serve("vllm_metrics_2.txt")
    line = next(x for x in metrics.body.splitlines()
                if x.startswith("vllm:e2e_request_latency_seconds_bucket") and 'le="1.0"' in x)
    before = next(x for x in (DATA / "vllm_metrics_1.txt").read_text().splitlines()
                  if x.startswith("vllm:e2e_request_latency_seconds_bucket") and 'le="1.0"' in x)
    assert before.endswith(" 25.0")
    cut = metrics.body.replace(line, line.rsplit(" ", 1)[0] + " 20.0")
    # Keep it cumulative within the page (le="0.8" must not exceed le="1.0").
    cut = cut.replace(
        next(x for x in cut.splitlines()
             if x.startswith("vllm:e2e_request_latency_seconds_bucket") and 'le="0.8"' in x),
        next(x for x in cut.splitlines()
             if x.startswith("vllm:e2e_request_latency_seconds_bucket")
             and 'le="0.8"' in x).rsplit(" ", 1)[0] + " 20.0")
    metrics.body = cut
    assert s.scrape(2.0) is None
    metrics.serve("vllm_metrics_2.txt")
    assert s.scrape(3.0)["requests"] == 75


def test_a_target_inconsistent_three_times_in_a_row_is_rebased(metrics):
    s = scraper_for(metrics, "vllm")
    metrics.body = (DATA / "vllm_metrics_2.txt").read_text() + START.format("1.7644752e+09")
    assert s.scrape(1.0) is None
    metrics.body = (DATA / "vllm_metrics_1.txt").read_text() + START.format("1.7644752e+09")
    assert [s.scrape(t) for t in (2.0, 3.0, 4.0)] == [None, None, None]
    assert s.previous.at == 4.0  # the third inconsistent scrape became the base
    metrics.body = (DATA / "vllm_metrics_2.txt").read_text() + START.format("1.7644752e+09")
    assert s.scrape(5.0)["requests"] == 75  # counted from the new base


# --- one bad window loses only itself (issue 8 item 6), the agent's side -----------------------


def test_a_page_with_non_cumulative_buckets_is_never_sent(metrics):
    """The agent does not send a histogram the server would refuse: buckets that are not
    cumulative within one page make the scrape unreadable (nothing sent, base kept)."""
    s = scraper_for(metrics, "vllm")
    metrics.serve("vllm_metrics_1.txt")
    assert s.scrape(1.0) is None
    metrics.serve("vllm_metrics_2.txt")
    line = next(x for x in metrics.body.splitlines()
                if x.startswith("vllm:e2e_request_latency_seconds_bucket") and 'le="0.5"' in x)
    metrics.body = metrics.body.replace(line, line.rsplit(" ", 1)[0] + " 500.0")  # > le="0.8"
    assert s.scrape(2.0) is None
    metrics.serve("vllm_metrics_2.txt")
    assert s.scrape(3.0)["requests"] == 75


def test_the_shipper_acks_a_partly_refused_batch_and_logs_each_refused_window(
        metrics, tmp_path, caplog):
    target = parse_target({"url": metrics.url, "kind": "vllm", "workload": "chat"}, "s")
    clock = iter([100.0, 115.0, 130.0])
    channel = ScrapeChannel([target], interval_s=15, clock=lambda: next(clock))
    for fixture in ("vllm_metrics_1.txt", "vllm_metrics_2.txt", "vllm_metrics_3_restarted.txt"):
        metrics.serve(fixture)
        channel.scrape_all()
    spool = Spool(tmp_path / "spool.db")
    channel.seal(spool)
    answer = {"status": "stored", "windows": 1, "refused": [
        {"index": 1, "field": "windows[1].workload", "message": "must be the slug of a workload"}]}
    server = FakeServer(script=[(202, {}, answer)]).start()
    try:
        shipper = Shipper(spool, HttpTransport(server.url, "tok"), None)
        with caplog.at_level("ERROR", logger="collectors.shipper"):
            shipper.step()
    finally:
        server.stop()
    assert spool.head() is None  # acknowledged: the valid window is stored, nothing resent
    spool.close()
    assert shipper.refused_windows == 1 and shipper.sent_batches == 1
    assert "windows[1].workload" in caplog.text


# --- vLLM time per output token (issue 8 item 4) ---------------------------------------------

TPOT_LE = ["0.01", "0.025", "0.05", "0.075", "0.1", "0.15", "0.2", "0.3", "0.4", "0.5", "0.75",
           "1.0", "2.5"]


def tpot_family(cumulative: list[int], total_s: float) -> str:
    """vllm:time_per_output_token_seconds as vLLM's prometheus_client prints it."""
    labels = 'engine="0",model_name="meta-llama/Llama-3.1-8B-Instruct"'
    lines = ["# HELP vllm:time_per_output_token_seconds Histogram of time per output token "
             "in seconds.", "# TYPE vllm:time_per_output_token_seconds histogram"]
    for le, c in zip([*TPOT_LE, "+Inf"], cumulative, strict=True):
        lines.append(f'vllm:time_per_output_token_seconds_bucket{{engine="0",le="{le}",'
                     f'model_name="meta-llama/Llama-3.1-8B-Instruct"}} {float(c)}')
    lines.append(f"vllm:time_per_output_token_seconds_count{{{labels}}} {float(cumulative[-1])}")
    lines.append(f"vllm:time_per_output_token_seconds_sum{{{labels}}} {total_s}")
    return "\n".join(lines) + "\n"


def test_vllm_time_per_output_token_percentiles(metrics):
    from greenops.kpis import inference, timings

    s = scraper_for(metrics, "vllm")
    first = [0, 100, 900, 2400, 3400, 3900, 4000, 4000, 4000, 4000, 4000, 4000, 4000, 4000]
    second = [0, 150, 1300, 3600, 5000, 5800, 5950, 6000, 6000, 6000, 6000, 6000, 6000, 6000]
    metrics.body = (DATA / "vllm_metrics_1.txt").read_text() + tpot_family(first, 250.0)
    assert s.scrape(1.0) is None
    metrics.body = (DATA / "vllm_metrics_2.txt").read_text() + tpot_family(second, 370.0)
    w = s.scrape(16.0)
    tpot = w["timings"]["per_output_token"]
    # Deltas: 0, 50, 400, 1200, 1600, 1900, 1950, 2000, ... (2000 tokens), 120 s in all.
    assert tpot["counts"] == [0, 50, 400, 1200, 1600, 1900, 1950] + [2000] * 7
    assert tpot["sum"] == pytest.approx(120.0)
    summary = timings.summary(inference.parse_timings(w["timings"], "timings"))
    row = next(r for r in summary if r["name"] == "per_output_token")
    assert row["mean_ms"] == pytest.approx(60.0)  # 120 s / 2000 tokens
    # p50: rank 1000 -> (50, 75] ms (400 -> 1200): 50 + 25 x 600/800 = 68.75 ms.
    assert row["p50_ms"] == pytest.approx(68.75)
    # p99: rank 1980 -> (200, 300] ms (1950 -> 2000): 200 + 100 x 30/50 = 260 ms.
    assert row["p99_ms"] == pytest.approx(260.0)
