"""Inference-server scraping: real Triton and vLLM /metrics text (tests/data/) served over HTTP.

Every expected figure below is worked out by hand from the fixture files; the comments show
the subtraction.
"""

from __future__ import annotations

import http.server
import math
import threading
import time
from pathlib import Path

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

try:
    from tests.agent_fakes import FakeServer
except ImportError:  # tests/ itself on sys.path
    from agent_fakes import FakeServer

DATA = Path(__file__).resolve().parent / "data"
VLLM_LE = [0.3, 0.5, 0.8, 1.0, 1.5, 2.0, 2.5, 5.0, 10.0, 15.0, 20.0, 30.0, 40.0, 50.0, 60.0,
           120.0, 240.0, 480.0, 960.0, 1920.0, 7680.0]


class MetricsServer:
    """Serves whichever fixture file is current at /metrics, like a live inference server."""

    def __init__(self) -> None:
        self.body = ""
        self.status = 200
        server = self

        class Handler(http.server.BaseHTTPRequestHandler):
            def log_message(self, *args: object) -> None:
                pass

            def do_GET(self) -> None:
                data = server.body.encode()
                self.send_response(server.status)
                self.send_header("Content-Type", "text/plain; version=0.0.4; charset=utf-8")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

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
    assert second == {
        "workload": "wl", "end": 1_764_480_015.0, "requests": 2460, "success": 360,
        "failure": 3, "latency": {"unit": "us", "sum": 6_000_000.0, "count": 360},
    }
    assert "le" not in second["latency"]  # counters give a mean only: no invented buckets
    # Triton restarted: every counter is below the previous scrape, so the window counts
    # what it counted since the restart: 800 + 20 inferences, 100 + 20 successes, 0 failures.
    assert third == {
        "workload": "wl", "end": 1_764_480_030.0, "requests": 820, "success": 120,
        "failure": 0, "latency": {"unit": "us", "sum": 1_900_000.0, "count": 120},
    }


def test_triton_label_filter_keeps_one_model(metrics):
    s = scraper_for(metrics, "triton", labels={"model": "resnet50"})
    _, second = run(s, metrics, "triton_counters_1.txt", "triton_counters_2.txt")
    assert second["requests"] == 2400  # 12000 - 9600: batches of 8 count 8 inferences
    assert (second["success"], second["failure"]) == (300, 2)
    assert second["latency"] == {"unit": "us", "sum": 4_800_000.0, "count": 300}  # 16 ms mean


def test_triton_histogram_is_passed_through_bucket_wise(metrics):
    s = scraper_for(metrics, "triton")
    _, second = run(s, metrics, "triton_histogram_1.txt", "triton_histogram_2.txt")
    assert second["requests"] == 53  # 90 - 37
    # Failures carry a reason label in Triton 24.x: (1-0) BACKEND + (2-0) REJECTED.
    assert (second["success"], second["failure"]) == (53, 3)
    # nv_inference_first_response_histogram_ms, cumulative deltas per bound:
    # le=100: 20-8, 500: 50-20, 2000: 85-35, 5000: 89-37, +Inf: 90-37; sum 30171-10771 ms.
    assert second["latency"] == {
        "unit": "ms", "le": [100.0, 500.0, 2000.0, 5000.0], "counts": [12, 30, 50, 52, 53],
        "cumulative": True, "sum": 19400.0,
    }


# --- vLLM ----------------------------------------------------------------------------------


def test_vllm_deltas_tokens_histogram_and_restart(metrics):
    s = scraper_for(metrics, "vllm", labels={"model_name": "meta-llama/Llama-3.1-8B-Instruct"})
    first, second, third = run(s, metrics, "vllm_metrics_1.txt", "vllm_metrics_2.txt",
                               "vllm_metrics_3_restarted.txt")
    assert first is None
    # finished_reason stop +60 (180-120), length +12 (42-30), abort +3 (5-2)
    assert (second["requests"], second["success"], second["failure"]) == (75, 72, 3)
    assert second["tokens"] == 24000  # generation tokens 69000 - 45000 (prompt tokens not)
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
    assert [(w["end"], w["requests"]) for w in doc["windows"]] == [(115.0, 75), (130.0, 6)]

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
    _, (row,) = inference.parse_windows({"batch_id": "3f0b1a1e-7a53-4c36-9d0e-5c1f1e0b8a11",
                                         "windows": [window]}, team, now_s=window["end"])
    assert (row.requests, row.success, row.failure, row.tokens) == (75, 72, 3, 24000)
    assert row.latency_sum_ms == pytest.approx(209_500.0)
    assert histogram.total(row.latency_buckets) == 75
    # 75 latencies; the 75th (p99 rank = ceil(0.99 * 75)) lies in vLLM's (15, 20] s bucket,
    # re-bucketed to the server bound that holds 20 s: 10^(87/20) ms = 22,387 ms.
    assert histogram.quantile_ms(row.latency_buckets, 0.99) == pytest.approx(22387.211386)


@pytest.mark.django_db
def test_server_accepts_triton_mean_latency_windows(metrics, team):
    from greenops.kpis import inference
    from greenops.workloads.models import Workload

    Workload.objects.create(team=team, name="Ranker", slug="wl")
    s = scraper_for(metrics, "triton")
    _, window = run(s, metrics, "triton_counters_1.txt", "triton_counters_2.txt")
    window["end"] = time.time()
    _, (row,) = inference.parse_windows({"batch_id": "0d4c3b7e-2f7a-4a8e-9b61-0c2e5d7f9a10",
                                         "windows": [window]}, team, now_s=window["end"])
    assert row.latency_sum_ms == pytest.approx(6000.0)  # 6,000,000 us
    assert row.latency_n == window["latency"]["count"] and row.latency_buckets == {}


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
    repo = Path(__file__).resolve().parent.parent
    proc = subprocess.Popen(
        [sys.executable, "-m", "collectors.cli", "run", "--server", server.url, "--config",
         str(config), "--nvml-lib", "tests.agent_fakes", "--spool", str(tmp_path / "s.db"),
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
