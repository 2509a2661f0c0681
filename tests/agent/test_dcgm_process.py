"""A real agent process on a host without NVML, fed by dcgm-exporter alone.

The exporter is a local HTTP server answering the pages of tests/data/dcgm_exporter_*.txt in
turn (the third, after a driver reload, from then on); the agent is started with an NVML module
that does not exist, and a ``[[scrape]] kind = "dcgm"`` target. Figures as in
tests/agent/test_dcgm.py: GPU 0's counter rose 7,500,000 mJ between pages 1 and 2 (7,500 J by
the counter); page 3's counter is lower (reset), so that interval is power x time. GPUs are
read every scrape_interval (0.5 s here), so the 2.5 s gap limit of the counter is far off.
"""

from __future__ import annotations

import http.server
import os
import subprocess
import sys
import threading
from pathlib import Path

import pytest

from tests.support import DATA, ROOT
from tests.support.agent_fakes import FakeServer, free_port
from tests.support.agent_process import stop_agent, wait_for

PAGES = [(DATA / name).read_bytes() for name in (
    "dcgm_exporter_1.txt", "dcgm_exporter_2.txt", "dcgm_exporter_3_reset.txt")]


class Exporter:
    def __init__(self) -> None:
        self.gets = 0
        exporter = self

        class Handler(http.server.BaseHTTPRequestHandler):
            def log_message(self, *args: object) -> None:
                pass

            def do_GET(self) -> None:
                body = PAGES[min(exporter.gets, len(PAGES) - 1)]
                exporter.gets += 1
                self.send_response(200)
                self.send_header("Content-Type", "text/plain; version=0.0.4")
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

        self.port = free_port()
        self.httpd = http.server.ThreadingHTTPServer(("127.0.0.1", self.port), Handler)
        threading.Thread(target=self.httpd.serve_forever, daemon=True).start()

    def stop(self) -> None:
        self.httpd.shutdown()


@pytest.fixture
def exporter():
    e = Exporter()
    yield e
    e.stop()


def samples_of(docs: list[dict], gpu: int) -> list[dict]:
    out = []
    for doc in docs:
        cols = doc["samples"]
        for i, g in enumerate(cols["gpu_index"]):
            if g == gpu:  # a profiling column absent from a batch is null throughout it
                out.append({k: (cols[k][i] if k in cols else None) for k in (
                    "energy_j", "energy_method", "sm_active_pct", "power_w", "ts")})
    return sorted(out, key=lambda s: s["ts"])


def test_an_agent_without_nvml_ships_what_dcgm_exporter_shows(tmp_path, exporter):
    server = FakeServer().start()
    try:
        proc = start_agent_with_dcgm(tmp_path, server.url, exporter.port)
        wait_for(lambda: exporter.gets >= 4, timeout=30)
        code, stderr, _ = stop_agent(proc)
    finally:
        server.stop()
    assert code == 0, stderr
    assert "every GPU figure comes from dcgm-exporter" in stderr
    assert {d["source"] for d in server.accepted} == {"dcgm"}
    inventory = server.inventory_posts()[0].doc
    assert [g["uuid"] for g in inventory["gpus"]] == [
        "GPU-9d0c4a7e-31b5-2f4e-8c1a-6b2d0e5f7a91", "GPU-3e8a1f52-c7d4-9b06-a2e3-5f18c4b7d620"]
    g0 = samples_of(server.accepted, 0)
    # Three pages, three readings: the repeated third page gives none.
    assert len(g0) == 3, g0
    assert (g0[1]["energy_j"], g0[1]["energy_method"]) == (7500.0, "counter")
    assert g0[2]["energy_method"] == "power"  # the counter went down: power x dt
    assert [s["sm_active_pct"] for s in g0] == pytest.approx([62.0, 70.0, 70.0])
    g1 = samples_of(server.accepted, 1)
    assert [s["sm_active_pct"] for s in g1] == [None] * 3  # not reported: null, not 0


def start_agent_with_dcgm(tmp_path: Path, server_url: str, port: int) -> subprocess.Popen:
    config = tmp_path / "agent.toml"
    config.write_text(
        "scrape_interval = 0.5\nbatch_seconds = 1\nhost_samples = \"off\"\n"
        f"[[scrape]]\nurl = \"http://127.0.0.1:{port}/metrics\"\nkind = \"dcgm\"\n")
    env = {k: v for k, v in os.environ.items() if not k.startswith("GREENOPS_")}
    env["GREENOPS_TOKEN"] = "tok-dcgm"
    return subprocess.Popen(
        [sys.executable, "-m", "collectors.cli", "run", "--server", server_url,
         "--config", str(config), "--nvml-lib", "tests.no_such_nvml_module",
         "--spool", str(tmp_path / "spool.db")],
        cwd=ROOT, env=env, stderr=subprocess.PIPE, text=True)
