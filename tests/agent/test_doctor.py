"""The agent's host checks and fact gathering, called directly (no server, no subprocess)."""

from __future__ import annotations

import os
import stat
import time
import tomllib

import pytest

from collectors import doctor, enroll
from tests.support.agent_fakes import NVML_ERROR_DRIVER_NOT_LOADED, FakeNvml


def test_gpu_check_lists_supported_and_missing_metrics():
    lib = FakeNvml(n=2, unsupported={"nvmlDeviceGetTotalEnergyConsumption",
                                     "nvmlDeviceGetClockInfo"})
    checks = doctor.check_gpus(None, None, lib=lib)
    assert checks[0] == doctor.Check(doctor.OK, "nvml", "2 GPU(s)")
    gpu0 = checks[1]
    assert gpu0.status == doctor.WARN and gpu0.name == "gpu 0"
    assert ("measures util_pct, mem_used_mib, power_w, temp_c, mem_util_pct, pcie_tx_kib_s, "
            "pcie_rx_kib_s, throttle_reasons, power_limit_w;") in gpu0.detail
    # nvmlDeviceGetClockInfo gives both clocks: both are missing.
    # FakeNvml has no NVLink (nvmlDeviceGetFieldValues), like a PCIe-only board.
    assert ("not available: energy_mj, mem_clock_mhz, nvlink_rx_kib_s, nvlink_tx_kib_s, "
            "sm_clock_mhz") in gpu0.detail
    assert "energy integrated from power (no counter)" in gpu0.detail
    assert lib.shut_down  # doctor leaves NVML as it found it


def test_gpu_check_with_full_support_and_without_driver():
    checks = doctor.check_gpus(None, None, lib=FakeNvml(n=1))
    assert checks[1].status == doctor.OK and "energy from the NVML counter" in checks[1].detail
    (no_driver,) = doctor.check_gpus(None, None,
                                     lib=FakeNvml(init_error=NVML_ERROR_DRIVER_NOT_LOADED))
    assert no_driver.status == doctor.FAIL and "NVIDIA driver not found" in no_driver.detail
    (sim,) = doctor.check_gpus(4, None)
    assert sim.status == doctor.WARN and "4 simulated GPUs" in sim.detail


def test_codecarbon_mode(tmp_path):
    import importlib.util

    rapl = tmp_path / "energy_uj"
    check = doctor.check_codecarbon(rapl)
    if importlib.util.find_spec("codecarbon") is None:
        assert check.status == doctor.WARN and "not installed" in check.detail
        return
    assert "CPU estimated from its TDP" in check.detail
    rapl.write_text("123456\n")
    assert "CPU measured by RAPL" in doctor.check_codecarbon(rapl).detail


@pytest.mark.parametrize("skew,status", [(0.4, doctor.OK), (-12.0, doctor.WARN),
                                         (400.0, doctor.FAIL)])
def test_clock_skew_thresholds(monkeypatch, skew, status):
    from collectors import probe

    answer = probe.Answer(200, {"time": 1.0}, "", 0.01, time.time())
    monkeypatch.setattr(probe, "server_time", lambda server, timeout_s: (answer, skew))
    server, clock = doctor.check_server("http://greenops.test")
    assert server.status == doctor.OK
    assert clock.status == status
    assert ("behind" if skew > 0 else "ahead of") in clock.detail


def test_server_down_and_not_configured():
    (down,) = doctor.check_server("http://127.0.0.1:9", timeout_s=1)
    assert down.status == doctor.FAIL and down.detail.startswith("cannot reach")
    (none,) = doctor.check_server(None)
    assert none.status == doctor.FAIL and "enroll" in none.detail


def _silent_listener():
    """A local socket that accepts connections but never answers: a metadata service that
    hangs, without sending a packet anywhere but loopback."""
    import socket

    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    sock.listen(8)
    return sock, f"http://127.0.0.1:{sock.getsockname()[1]}"


def test_metadata_service_that_does_not_answer_costs_at_most_its_timeout():
    sock, url = _silent_listener()
    try:
        started = time.monotonic()
        assert enroll.cloud_facts(url, timeout_s=0.3) == {}
        assert time.monotonic() - started < 1.5
    finally:
        sock.close()
    assert enroll.cloud_facts(None) == {}


def test_configured_facts_win_and_skip_the_metadata_service():
    facts = enroll.gather_facts({"instance_type": "a2-highgpu-1g", "region": "us-central1",
                                 "provider": "gcp", "country": None},
                                metadata_url="http://127.0.0.1:9")  # never asked
    assert facts["instance_type"] == "a2-highgpu-1g" and facts["facts_source"] == "config"
    assert "country" not in facts and facts["ram_total_mib"] > 0


def test_proc_parsers(tmp_path):
    cpuinfo = tmp_path / "cpuinfo"
    cpuinfo.write_text("processor\t: 0\nmodel name\t: AMD EPYC 9654 96-Core Processor\n")
    assert enroll.cpu_model(cpuinfo) == "AMD EPYC 9654 96-Core Processor"
    meminfo = tmp_path / "meminfo"
    meminfo.write_text("MemTotal:       2113642496 kB\nMemFree: 1 kB\n")
    assert enroll.ram_total_mib(meminfo) == 2113642496 // 1024  # 2064104 MiB


def test_write_config_is_0600_atomic_and_merges(tmp_path):
    path = tmp_path / "greenops" / "agent.toml"
    old_umask = os.umask(0)  # even a permissive umask must not widen the mode
    try:
        enroll.write_config(path, {"server": "http://a", "token": "gho_1", "spool_max_mb": 64})
        enroll.write_config(path, {"server": "http://b", "token": 'gho_"2'})
    finally:
        os.umask(old_umask)
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    assert tomllib.loads(path.read_text()) == {"server": "http://b", "token": 'gho_"2',
                                                "spool_max_mb": 64}
    assert [p.name for p in path.parent.iterdir()] == ["agent.toml"]  # no temp file left


class _FakeCloud:
    """Serves one cloud's metadata API on loopback; anything else is a 404 as real ones do."""

    def __init__(self, routes: dict[tuple[str, str], tuple[dict, bytes]]):
        import http.server
        import threading

        outer = routes

        class Handler(http.server.BaseHTTPRequestHandler):
            def _serve(self):
                want = outer.get((self.command, self.path))
                if want is None or any(self.headers.get(k) != v for k, v in want[0].items()):
                    self.send_response(404)
                    self.end_headers()
                    return
                self.send_response(200)
                self.send_header("Content-Length", str(len(want[1])))
                self.end_headers()
                self.wfile.write(want[1])

            do_GET = do_PUT = _serve  # noqa: N815

            def log_message(self, *args):
                pass

        self.server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        threading.Thread(target=self.server.serve_forever, daemon=True).start()
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"

    def close(self):
        self.server.shutdown()


def test_gcp_metadata():
    g = {"Metadata-Flavor": "Google"}
    cloud = _FakeCloud({
        ("GET", "/computeMetadata/v1/instance/machine-type"):
            (g, b"projects/1234/machineTypes/a2-highgpu-1g"),
        ("GET", "/computeMetadata/v1/instance/zone"): (g, b"projects/1234/zones/us-central1-a"),
    })
    try:
        assert enroll.cloud_facts(cloud.url) == {
            "provider": "gcp", "facts_source": "gcp-metadata", "instance_type": "a2-highgpu-1g",
            "region": "us-central1"}
    finally:
        cloud.close()


def test_azure_metadata():
    body = b'{"vmSize": "Standard_NC24ads_A100_v4", "location": "eastus", "name": "vm1"}'
    cloud = _FakeCloud({
        ("GET", "/metadata/instance/compute?api-version=2021-02-01"): ({"Metadata": "true"}, body),
    })
    try:
        assert enroll.cloud_facts(cloud.url) == {
            "provider": "azure", "facts_source": "azure-imds",
            "instance_type": "Standard_NC24ads_A100_v4", "region": "eastus"}
    finally:
        cloud.close()
