"""CPU/RAM energy: choosing codecarbon's method, unit conversion, the channel, and the wire.

codecarbon itself is replaced by small namespaces passed in (no sys.modules patching, no RAPL
files needed); one test at the end runs the real codecarbon where it is installed.
"""

from __future__ import annotations

import logging
import threading
import time
from types import SimpleNamespace

import pytest

from collectors import batch as wire
from collectors.agent import Agent
from collectors.host_energy import (
    HOST_ENERGY_PATH,
    CodecarbonSource,
    HostEnergyChannel,
    HostReading,
    codecarbon_installed,
    plan_cpu,
)
from collectors.simulated import SimulatedSource
from collectors.spool import SAMPLES_PATH, Spool
from tests.support import ROOT

# --- choosing the method, as codecarbon's ResourceTracker would -------------------------------


def fake_cc(rapl=False, psutil=True, model="AMD EPYC 9654 96-Core Processor", registry_w=360,
            sockets=2, threads=384):
    class TDP:
        def _get_cpu_power_from_registry(self, raw):
            assert raw == model
            return registry_w

    return SimpleNamespace(
        version="3.3.2",
        hardware=SimpleNamespace(MODE_CPU_LOAD="cpu_load"),
        cpu=SimpleNamespace(is_rapl_available=lambda: rapl, is_psutil_available=lambda: psutil,
                            TDP=TDP, DEFAULT_POWER_PER_CORE=4),
        util=SimpleNamespace(detect_cpu_model=lambda: model, count_physical_cpus=lambda: sockets,
                             count_cpus=lambda: threads),
    )


def test_rapl_wins_on_linux():
    plan = plan_cpu(fake_cc(rapl=True), system="Linux")
    assert (plan.mode, plan.method) == ("intel_rapl", "rapl")


def test_rapl_is_linux_only():
    assert plan_cpu(fake_cc(rapl=True), system="Darwin").method == "cpu_load"


def test_known_model_scales_tdp_by_load_for_every_socket():
    plan = plan_cpu(fake_cc(), system="Linux")
    assert (plan.mode, plan.method, plan.tdp_w) == ("cpu_load", "cpu_load", 720.0)  # 2 x 360 W


def test_known_model_without_psutil_is_a_tdp_estimate():
    plan = plan_cpu(fake_cc(psutil=False), system="Linux")
    assert (plan.mode, plan.method, plan.tdp_w) == ("constant", "tdp", 720.0)


def test_unknown_model_is_labelled_constant():
    plan = plan_cpu(fake_cc(registry_w=None, threads=64), system="Linux")
    assert (plan.method, plan.tdp_w) == ("constant", 256.0)  # codecarbon's 4 W x 64 threads


# --- readings: codecarbon's kWh to joules ----------------------------------------------------


class FakeHardware:
    """codecarbon's CPU/RAM surface: measure_power_and_energy -> (.W, .kWh)."""

    def __init__(self, watts: float) -> None:
        self.watts = watts
        self.started = False
        self.durations: list[float] = []

    def start(self) -> None:
        self.started = True

    def measure_power_and_energy(self, last_duration: float):
        self.durations.append(last_duration)
        return (SimpleNamespace(W=self.watts),
                SimpleNamespace(kWh=self.watts * last_duration / 3.6e6))


def test_source_converts_kwh_to_joules():
    cpu, ram = FakeHardware(150.0), FakeHardware(12.0)
    source = CodecarbonSource(cpu, ram, "cpu_load", "3.3.2")
    source.start()
    assert cpu.started and ram.started
    r = source.read(15.0)
    assert r == HostReading(150.0, pytest.approx(2250.0), 12.0, pytest.approx(180.0))
    assert cpu.durations == ram.durations == [15.0]


# --- the channel -----------------------------------------------------------------------------


class FakeSource:
    kind = "codecarbon"
    version = "3.3.2"
    cpu_method = "rapl"
    ram_method = "model"

    def __init__(self) -> None:
        self.dts: list[float] = []

    def start(self) -> None:
        pass

    def read(self, dt_s: float) -> HostReading:
        self.dts.append(dt_s)
        return HostReading(40.0, 40.0 * dt_s, 6.0, 6.0 * dt_s)


def test_channel_spools_a_host_energy_batch_in_the_servers_format(tmp_path):
    source = FakeSource()
    mono = iter([100.0, 115.0, 130.0])
    wall = iter([1_764_480_015.0, 1_764_480_030.0])
    channel = HostEnergyChannel(lambda: source, 15.0, clock=lambda: next(wall),
                                monotonic=lambda: next(mono))
    assert channel.open()
    channel.read_once()
    channel.read_once()
    assert source.dts == [15.0, 15.0]  # from the monotonic clock
    with Spool(tmp_path / "s.db") as spool:
        assert channel.seal(spool) == 1
        assert channel.seal(spool) == 0  # nothing new since
        head = spool.head()
        assert (head.path, head.samples) == (HOST_ENERGY_PATH, 2)
        doc = wire.decode(head.payload)
    assert doc["source"] == "codecarbon" and doc["codecarbon_version"] == "3.3.2"
    assert doc["tracking_mode"] == "machine"
    assert doc["samples"] == {
        "ts": [1_764_480_015.0, 1_764_480_030.0],
        "cpu_power_w": [40.0, 40.0], "cpu_energy_j": [600.0, 600.0],  # 40 W x 15 s
        "ram_power_w": [6.0, 6.0], "ram_energy_j": [90.0, 90.0],  # 6 W x 15 s
        "cpu_method": ["rapl", "rapl"], "ram_method": ["model", "model"],
    }


def test_channel_that_cannot_start_says_so_and_sends_nothing(tmp_path, caplog):
    def broken():
        raise ImportError("No module named 'codecarbon'")

    channel = HostEnergyChannel(broken, 15.0)
    with caplog.at_level(logging.WARNING):
        assert not channel.open()
    assert "CPU/RAM energy is off" in caplog.text
    with Spool(tmp_path / "s.db") as spool:
        assert channel.seal(spool) == 0
        assert spool.depth() == 0


def test_without_codecarbon_the_agent_runs_as_before(monkeypatch, caplog):
    from collectors import channels
    from collectors.config import AgentConfig

    monkeypatch.setattr(channels, "codecarbon_installed", lambda: False)
    with caplog.at_level(logging.INFO):
        built = channels.build_channels(AgentConfig(host_samples="off"))
    assert built == []
    assert caplog.text.count("CPU/RAM energy is off") == 1
    assert channels.build_channels(AgentConfig(host_energy="off", host_samples="off")) == []


def test_agent_spools_samples_and_host_energy_to_their_endpoints(tmp_path):
    source = FakeSource()
    channel = HostEnergyChannel(lambda: source, 0.05)
    with Spool(tmp_path / "s.db") as spool:
        agent = Agent(SimulatedSource(1), spool, None, interval_s=0.02, batch_seconds=0.1,
                      channels=[channel])
        stopper = threading.Timer(0.5, agent.stop)
        stopper.start()
        agent.run()
        kinds: dict[str, list[dict]] = {}
        while spool.head() is not None:
            head = spool.head()
            kinds.setdefault(head.path, []).append(wire.decode(head.payload))
            spool.ack(head.batch_id)
    assert set(kinds) == {SAMPLES_PATH, HOST_ENERGY_PATH}
    readings = sum(len(d["samples"]["ts"]) for d in kinds[HOST_ENERGY_PATH])
    assert readings == len(source.dts) >= 3  # every reading spooled once, the tail at stop


# --- the server takes what the agent sends ---------------------------------------------------


@pytest.mark.django_db
def test_server_accepts_the_agents_host_energy_batch(host, tmp_path):
    from greenops.carbon import host_energy as server_side
    from greenops.carbon.models import HostEnergySample

    h, _token = host
    source = FakeSource()
    now = time.time()
    mono = iter([0.0, 15.0])
    channel = HostEnergyChannel(lambda: source, 15.0, clock=lambda: now,
                                monotonic=lambda: next(mono))
    channel.open()
    channel.read_once()
    with Spool(tmp_path / "s.db") as spool:
        channel.seal(spool)
        doc = wire.decode(spool.head().payload)
    answer = server_side.accept(h, doc)
    assert answer["inserted"] == 1
    row = HostEnergySample.objects.get(host=h)
    assert (row.cpu_energy_j, row.ram_energy_j, row.cpu_method) == (600.0, 90.0, "rapl")


# --- the real codecarbon, where installed ------------------------------------------------------


@pytest.mark.skipif(not codecarbon_installed(), reason="codecarbon not installed")
def test_real_codecarbon_gives_a_labelled_reading():
    # In a child process: importing codecarbon initialises NVML and would stay imported for
    # every later test (some check that the server never imports it).
    import json
    import subprocess
    import sys

    script = (
        "import json, time\n"
        "from collectors.host_energy import CodecarbonSource\n"
        "s = CodecarbonSource.detect(); s.start(); time.sleep(0.2)\n"
        "print(json.dumps([s.cpu_method, s.ram_method, s.version, list(s.read(0.2))]))\n"
    )
    out = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True,
                         timeout=120, cwd=ROOT, check=True)
    cpu_method, ram_method, version, r = json.loads(out.stdout.strip().splitlines()[-1])
    assert cpu_method in ("rapl", "cpu_load", "tdp", "constant") and ram_method == "model"
    assert int(version.split(".")[0]) >= 3
    cpu_w, cpu_j, ram_w, ram_j = r
    assert cpu_w > 0 and ram_w > 0 and cpu_j > 0
    assert ram_j == pytest.approx(ram_w * 0.2)  # the RAM model is power x time
