"""NvmlSource over a fake pynvml, the simulated source, and the CLI when NVML is missing."""

import os
import subprocess
import sys

import pytest

from collectors.simulated import SimulatedSource
from collectors.sources import NvmlSource, NvmlUnavailable, load_nvml_lib
from tests.support import ROOT

try:
    from tests.support.agent_fakes import NVML_ERROR_GPU_IS_LOST, FakeNvml, NVMLError
except ImportError:  # tests/ itself on sys.path (pytest's rootdir-less import mode)
    from agent_fakes import NVML_ERROR_GPU_IS_LOST, FakeNvml, NVMLError



def test_readings_are_converted_to_wire_units():
    fake = FakeNvml(n=2, power_mw=312_500)
    src = NvmlSource(fake)
    gpus = src.gpus()
    assert [g.index for g in gpus] == [0, 1]
    assert gpus[1].uuid == "GPU-00000000-fake-0000-0000-000000000001"
    assert gpus[0].name == "Fake NVIDIA A100-SXM4-40GB"
    assert gpus[0].power_limit_w == 400.0  # 400_000 mW
    assert gpus[0].memory_total_mib == 40960
    r = src.read(0)
    assert r.power_w == 312.5  # mW -> W
    assert r.util_pct == 87.0
    assert r.mem_used_mib == 1024.0  # 1 GiB in bytes -> MiB
    assert r.energy_mj == 10_001_000
    assert r.temp_c == 61.0
    assert r.sm_clock_mhz == 1410.0
    src.close()
    assert fake.shut_down


def test_unsupported_metric_is_none_and_not_asked_again():
    fake = FakeNvml(n=2, unsupported={"nvmlDeviceGetTotalEnergyConsumption"},
                    nvlink_kib_per_read=(0, 0))  # an NVLink board: only energy is missing
    src = NvmlSource(fake)
    for _ in range(5):
        r = src.read(0)
        assert r.energy_mj is None
        assert r.power_w == 250.0  # the other metrics are unaffected
    assert fake.calls["nvmlDeviceGetTotalEnergyConsumption"] == 1
    assert src.unsupported(0) == {"energy_mj"}
    # Remembered per GPU: GPU 1 is asked once too.
    src.read(1)
    src.read(1)
    assert fake.calls["nvmlDeviceGetTotalEnergyConsumption"] == 2


def test_transient_error_is_none_but_retried():
    class Flaky(FakeNvml):
        def nvmlDeviceGetPowerUsage(self, handle):
            self._hit("nvmlDeviceGetPowerUsage")
            if self.calls["nvmlDeviceGetPowerUsage"] == 1:
                raise NVMLError(NVML_ERROR_GPU_IS_LOST)
            return 100_000

    src = NvmlSource(Flaky(n=1, nvlink_kib_per_read=(0, 0)))
    assert src.read(0).power_w is None
    assert src.read(0).power_w == 100.0
    assert src.unsupported(0) == frozenset()


def test_bytes_names_from_old_pynvml_become_str():
    src = NvmlSource(FakeNvml(n=1, bytes_strings=True))
    gpu = src.gpus()[0]
    assert gpu.name == "Fake NVIDIA A100-SXM4-40GB"
    assert gpu.uuid.startswith("GPU-")
    assert isinstance(gpu.uuid, str)


def test_power_limit_unsupported_is_none():
    src = NvmlSource(FakeNvml(n=1, unsupported={"nvmlDeviceGetPowerManagementLimit"}))
    assert src.gpus()[0].power_limit_w is None


@pytest.mark.parametrize(
    "code, message",
    [
        (9, "NVIDIA driver not found (NVML: Driver Not Loaded)"),
        (12, "NVIDIA driver not found (NVML: NVML Shared Library Not Found)"),
        (999, "NVML failed to start (NVML: Unknown Error 999)"),
    ],
)
def test_no_driver_raises_nvml_unavailable(code, message):
    with pytest.raises(NvmlUnavailable) as info:
        NvmlSource(FakeNvml(init_error=code))
    assert str(info.value) == message


def test_missing_module_raises_nvml_unavailable():
    with pytest.raises(NvmlUnavailable, match="cannot import NVML module"):
        load_nvml_lib("tests.no_such_nvml_module")


def _cli(*args, env_extra=None, tmp_path=None):
    env = {k: v for k, v in os.environ.items() if not k.startswith("GREENOPS_")}
    env.update(env_extra or {})
    return subprocess.run(
        [sys.executable, "-m", "collectors.cli", *args],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=30,
    )


def test_cli_without_driver_prints_one_line_and_exits_2(tmp_path):
    empty = tmp_path / "agent.toml"
    empty.write_text("")
    proc = _cli(
        "run",
        "--server",
        "http://127.0.0.1:9",
        "--token",
        "t",
        "--config",
        str(empty),
        "--spool",
        str(tmp_path / "spool.db"),
        "--nvml-lib",
        "tests.support.agent_fakes",
        env_extra={"AGENT_FAKES_INIT_ERROR": "9"},
    )
    assert proc.returncode == 2
    lines = proc.stderr.strip().splitlines()
    assert lines == [
        "greenops-agent: NVIDIA driver not found (NVML: Driver Not Loaded); "
        "use --simulate N to run with simulated GPUs, or a [[scrape]] kind = \"dcgm\" target "
        "to read GPUs from dcgm-exporter"
    ]
    assert "Traceback" not in proc.stderr
    assert not (tmp_path / "spool.db").exists()


def test_cli_without_server_prints_one_line_and_exits_2(tmp_path):
    empty = tmp_path / "agent.toml"
    empty.write_text("")
    proc = _cli("run", "--simulate", "1", "--config", str(empty))
    assert proc.returncode == 2
    assert proc.stderr.strip().splitlines() == [
        "greenops-agent: no server URL: pass --server URL or set GREENOPS_SERVER"
    ]


def test_cli_version():
    proc = _cli("version")
    assert proc.returncode == 0
    assert proc.stdout.strip() == "greenops-agent 0.1.0"


def test_simulated_source_is_deterministic_and_plausible():
    t = [1_764_480_000.0]
    a = SimulatedSource(4, seed=7, clock=lambda: t[0])
    b = SimulatedSource(4, seed=7, clock=lambda: t[0])
    assert a.gpus()[0].name == "Simulated NVIDIA H100 80GB"
    phases = set()
    prev_energy = [None] * 4
    for step in range(3600):
        t[0] = 1_764_480_000.0 + step
        for i in range(4):
            ra, rb = a.read(i), b.read(i)
            assert ra == rb
            assert 0 <= ra.util_pct <= 100
            assert 60 <= ra.power_w <= 710
            if prev_energy[i] is not None:
                # Counter consistent with power: 1 s between reads, so the delta in J is
                # within the min/max power of the pair.
                delta_j = (ra.energy_mj - prev_energy[i]) / 1000
                assert 60 <= delta_j <= 710
            prev_energy[i] = ra.energy_mj
            phases.add(a.phase(i, t[0]))
    assert phases == {"idle", "training", "inference"}
    assert SimulatedSource(1, seed=8, clock=lambda: t[0]).read(0) != SimulatedSource(
        1, seed=7, clock=lambda: t[0]
    ).read(0)
