"""A host whose only GPU source is dcgm-exporter (a Kubernetes GPU node: no NVML in the agent's
reach) enrolls, runs and shows figures on its page, without --simulate.

dcgm-exporter's real text format (tests/data/dcgm_exporter_1.txt, then _2.txt, 15 s apart on
the exporter's clock) is served from a loopback HTTP server. NVML fails to initialise (the fake
NVML with AGENT_FAKES_INIT_ERROR, as on a node without the driver library), so enroll and run
both fall back to the exporter. Hand-computed from the pages:

  GPU 0 (GPU-9d0c..., H100): power 512.25 W, then 487.75 W -> mean 500.0 W
  GPU 1 (GPU-3e8a..., H100): power 98.5 W, then 101.5 W    -> mean 100.0 W
  host: 500.0 + 100.0 = 600.0 W
  energy from the mJ counters, page 1 -> 2: GPU 0 7,500 J, GPU 1 1,500 J (9,000 J in all)

A configured source is never dropped in silence: --simulate with --dcgm-url, and a config
holding both simulate and a dcgm target, are refused with one line.
"""

from __future__ import annotations

import http.server
import os
import signal
import subprocess
import sys
import threading
import time
import tomllib
from pathlib import Path

import pytest

from greenops.telemetry import enrollment
from greenops.telemetry.models import GpuSample, Host

REPO = Path(__file__).resolve().parents[2]
DATA = Path(__file__).resolve().parents[1] / "data"
PAGES = [(DATA / f"dcgm_exporter_{n}.txt").read_bytes() for n in (1, 2)]
A = "GPU-9d0c4a7e-31b5-2f4e-8c1a-6b2d0e5f7a91"
B = "GPU-3e8a1f52-c7d4-9b06-a2e3-5f18c4b7d620"


class Exporter(http.server.BaseHTTPRequestHandler):
    """dcgm-exporter's /metrics: page 1 for the first `first_n` requests, then page 2."""

    served = 0
    first_n = 1

    def do_GET(self):  # noqa: N802
        if self.path != "/metrics":
            self.send_response(404)
            self.end_headers()
            return
        cls = type(self)
        body = PAGES[0] if cls.served < cls.first_n else PAGES[1]
        cls.served += 1
        self.send_response(200)
        self.send_header("Content-Type", "text/plain; version=0.0.4")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args):
        pass


@pytest.fixture
def exporter():
    handler = type("PagedExporter", (Exporter,), {"served": 0, "first_n": 1})
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    yield f"http://127.0.0.1:{server.server_address[1]}/metrics", handler
    server.shutdown()


def _env() -> dict:
    env = {k: v for k, v in os.environ.items() if not k.startswith("GREENOPS_")}
    # The fake NVML fails nvmlInit as a node without the driver library does.
    env["AGENT_FAKES_INIT_ERROR"] = "12"  # NVML_ERROR_LIBRARY_NOT_FOUND
    env["HOME"] = env.get("HOME", "/tmp")
    return env


def _agent(*args: str, env: dict | None = None, timeout: float = 60):
    return subprocess.run([sys.executable, "-m", "collectors.cli", *args], cwd=REPO,
                          env=env or _env(), capture_output=True, text=True, timeout=timeout)


def _wait_for(predicate, timeout: float = 30.0) -> None:
    deadline = time.monotonic() + timeout
    while not predicate():
        assert time.monotonic() < deadline, "timed out"
        time.sleep(0.1)


@pytest.mark.django_db(transaction=True)
def test_dcgm_only_host_enrolls_runs_and_shows_its_figures(live_server, client, team, users,
                                                            exporter, tmp_path):
    url, handler = exporter
    _row, token = enrollment.issue_enrollment_token(team, users["owner"])
    config = tmp_path / "agent.toml"
    # Without --dcgm-url a host without NVML cannot enroll, and says what to do instead.
    proc = _agent("enroll", "--server", live_server.url, "--token", token, "--config",
                  str(config), "--nvml-lib", "tests.support.agent_fakes", "--metadata-url", "off")
    assert proc.returncode == 2 and "--dcgm-url" in proc.stderr, proc.stderr
    proc = _agent("enroll", "--server", live_server.url, "--token", token, "--config",
                  str(config), "--nvml-lib", "tests.support.agent_fakes", "--metadata-url", "off",
                  "--name", "k8s-gpu-7", "--dcgm-url", url)
    assert proc.returncode == 0, proc.stderr
    assert "enrolled as host k8s-gpu-7" in proc.stdout and "(2 GPUs)" in proc.stdout
    written = tomllib.loads(config.read_text())
    assert written["scrape"] == [{"url": url, "kind": "dcgm"}]
    assert "simulate" not in written
    host = Host.objects.get(team=team, name="k8s-gpu-7")
    assert sorted(host.gpus.values_list("index", "uuid", "name")) == [
        (0, A, "NVIDIA H100 80GB HBM3"), (1, B, "NVIDIA H100 80GB HBM3")]

    # `run` reads only the config enroll wrote; page 1 was read by enroll, so the first
    # reading is page 1 again, then page 2.
    handler.served, handler.first_n = 0, 1
    # Both readings should land in one minute (the hour view's interval): start early in one.
    if time.time() % 60 > 40:
        time.sleep(61 - time.time() % 60)
    env = {**_env(), "GREENOPS_SCRAPE_INTERVAL": "0.3", "GREENOPS_BATCH_SECONDS": "0.3",
           "GREENOPS_HOST_SAMPLES": "off", "GREENOPS_HOST_ENERGY": "off"}
    run = subprocess.Popen(
        [sys.executable, "-m", "collectors.cli", "run", "--config", str(config), "--spool",
         str(tmp_path / "spool.db")], cwd=REPO, env=env, stderr=subprocess.PIPE, text=True)
    try:
        _wait_for(lambda: GpuSample.objects.filter(gpu__host=host, energy_j__isnull=False)
                  .count() >= 2)
    finally:
        run.send_signal(signal.SIGTERM)
        _, stderr = run.communicate(timeout=20)
    assert run.returncode == 0, stderr
    rows = {(s.gpu.index, s.power_w, s.energy_j) for s in GpuSample.objects.filter(
        gpu__host=host).select_related("gpu")}
    assert rows == {(0, 512.25, None), (1, 98.5, None), (0, 487.75, 7500.0),
                    (1, 101.5, 1500.0)}, rows

    # Figures on the host page, as its owner sees them (the minute rollups hold them).
    client.force_login(users["owner"])
    html = client.get(f"/teams/{team.slug}/hosts/{host.id}/?range=hour").content.decode()
    assert "NVIDIA H100 80GB HBM3" in html and A in html
    assert 'data-kpi="avg_power_w">300 W' in html  # (500 + 100) / 2 GPUs
    table = html.split('id="power-intervals"')[1].split("</table>")[0]
    assert "600.0 W" in table and "500.0 W" in table and "100.0 W" in table
    # The same figures from the API, with a read token.
    from greenops.teams.models import ApiToken

    _row, read = ApiToken.issue(team, "grafana", scope="read")
    client.logout()
    doc = client.get(f"/api/v1/teams/{team.slug}/hosts/{host.id}/power?range=hour",
                     HTTP_AUTHORIZATION=f"Bearer {read}").json()
    (interval,) = doc["intervals"]  # both pages' samples fall in one display bucket
    assert interval["host_avg_power_w"] == 600.0 and interval["gpus_reporting"] == 2
    assert [(g["index"], g["avg_power_w"]) for g in interval["gpus"]] == [(0, 500.0),
                                                                          (1, 100.0)]


def test_simulate_and_a_dcgm_target_are_refused_not_silently_dropped(tmp_path):
    proc = _agent("enroll", "--server", "http://127.0.0.1:9", "--token", "gen_x", "--config",
                  str(tmp_path / "a.toml"), "--simulate", "2", "--dcgm-url",
                  "http://127.0.0.1:9400/metrics")
    assert proc.returncode == 2 and "exclude each other" in proc.stderr
    assert len(proc.stderr.strip().splitlines()) == 1
    config = tmp_path / "agent.toml"
    config.write_text('server = "http://127.0.0.1:9"\ntoken = "gho_x"\nsimulate = 2\n'
                      '[[scrape]]\nurl = "http://127.0.0.1:9400/metrics"\nkind = "dcgm"\n')
    proc = _agent("run", "--config", str(config), "--spool", str(tmp_path / "spool.db"))
    assert proc.returncode == 2
    assert "simulate = 2 and a dcgm-exporter target (http://127.0.0.1:9400/metrics)" in \
        proc.stderr
