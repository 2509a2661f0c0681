"""``greenops-agent bench`` end to end on a fake NVML: a fake benchmark command adds a known
number of joules to the fake GPU's energy counter per repeat, so every figure is known.

Each test builds a "base" and a "head" checkout (a profile.json: joules per repeat, the
inferences done) and runs the real CLI with --nvml-lib tests.support.bench_fakes.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

from collectors import bench, cli
from collectors import bench_gate as gate
from collectors.sources import NvmlSource
from tests.support import ROOT
from tests.support.bench_fakes import CounterFileNvml, write_profile

FAKE_BENCH = [sys.executable, "-m", "tests.support.bench_fakes"]


@pytest.fixture
def fake_gpu(tmp_path, monkeypatch):
    energy = tmp_path / "energy_mj"
    monkeypatch.setenv("BENCH_FAKES_ENERGY_FILE", str(energy))
    monkeypatch.setenv("PYTHONPATH", str(ROOT))
    monkeypatch.delenv("BENCH_FAKES_DRIVER", raising=False)
    for var in ("GREENOPS_SERVER", "GREENOPS_API_TOKEN", "GREENOPS_TOKEN", "GITHUB_SHA",
                "CI_COMMIT_SHA", "GITHUB_HEAD_REF", "GITHUB_REF_NAME", "CI_COMMIT_REF_NAME"):
        monkeypatch.delenv(var, raising=False)
    return energy


def run_cli(head: Path, *flags: str, monkeypatch) -> int:
    monkeypatch.chdir(head)
    # Throughput is real wall time of a Python start-up on a shared CI machine: noise these
    # tests do not control, so it gets a tolerance it cannot exceed; energy is exact.
    argv = ["bench", "--workload", "ranker", "--nvml-lib", "tests.support.bench_fakes",
            "--no-host-energy", "--commit", "c0ffee", "--branch", "feature",
            "--tolerance", "throughput_per_s=100", *flags, "--", *FAKE_BENCH]
    return cli.main(argv)


def test_a_known_energy_regression_fails_the_gate(tmp_path, fake_gpu, monkeypatch, capsys):
    base = write_profile(tmp_path / "base", [100.0, 100.5, 99.5, 100.2, 99.8], count=1000)
    head = write_profile(tmp_path / "head", [120.0, 120.6, 119.4, 120.24, 119.76], count=1000)
    report = tmp_path / "gate.md"
    out = tmp_path / "run.json"
    rc = run_cli(head, "--base-dir", str(base), "--repeat", "5", "--warmup", "1",
                 "--count-from", "result.json", "--report", str(report), "--output", str(out),
                 monkeypatch=monkeypatch)
    assert rc == 1
    doc = json.loads(out.read_text())
    # The fake GPU's counter rose by exactly each repeat's joules; 1,000 inferences a run:
    # base median 100.0 J -> 0.1000 J/inference, head median 120.0 J -> 0.1200: +20 %.
    head_j = [s["gpu_energy_j"] for s in doc["samples"] if s["role"] == "head"]
    assert head_j == pytest.approx([120.0, 120.6, 119.4, 120.24, 119.76])
    assert [s["energy_method"] for s in doc["samples"]] == ["counter"] * 10
    row = doc["comparison"]["rows"][0]
    assert row["baseline"] == pytest.approx(0.1)
    assert row["current"] == pytest.approx(0.12)
    assert row["change_pct"] == pytest.approx(20.0)
    assert row["p_value"] == pytest.approx(2 / 252)  # every head repeat above every base one
    assert row["verdict"] == gate.FAIL
    assert doc["comparison"]["verdict"] == gate.FAIL
    printed = capsys.readouterr().out
    assert "GreenOps efficiency gate: FAIL" in printed
    # The Markdown report is the same table the log shows.
    comparison = gate.Comparison.from_dict(doc["comparison"])
    assert report.read_text() == gate.render_markdown(comparison)
    assert "| GPU energy per inference (J) | 0.1000 | 0.1200 | +20.0 % |" in report.read_text()
    assert doc["hardware_key"] == "Fake NVIDIA A100-SXM4-40GB 400 W 1410 MHz | driver 550.54.15"
    assert doc["commit"] == "c0ffee" and doc["branch"] == "feature"


def test_noise_within_tolerance_passes(tmp_path, fake_gpu, monkeypatch, capsys):
    base = write_profile(tmp_path / "base", [100.0, 101.0, 99.0, 100.5, 99.5])
    head = write_profile(tmp_path / "head", [101.0, 100.0, 102.0, 100.5, 101.5])  # ~ +1 %
    rc = run_cli(head, "--base-dir", str(base), "--count", "1000", "--warmup", "0",
                 monkeypatch=monkeypatch)
    out = capsys.readouterr().out
    assert rc == 0, out
    assert "GreenOps efficiency gate: PASS" in out
    assert "within the 5 % tolerance" in out


def test_a_regression_within_the_noise_is_inconclusive(tmp_path, fake_gpu, monkeypatch, capsys):
    base = write_profile(tmp_path / "base", [100.0, 70.0, 130.0, 90.0, 110.0])
    head = write_profile(tmp_path / "head", [108.0, 75.0, 140.0, 97.0, 119.0])  # median +8 %
    rc = run_cli(head, "--base-dir", str(base), "--count", "1000", "--warmup", "0",
                 monkeypatch=monkeypatch)
    out = capsys.readouterr().out
    assert rc == 3
    assert "INCONCLUSIVE" in out and "8.0 % worse but within the noise" in out
    # --allow-inconclusive keeps the verdict on screen but does not fail the job.
    assert run_cli(head, "--base-dir", str(base), "--count", "1000", "--warmup", "0",
                   "--allow-inconclusive", monkeypatch=monkeypatch) == 0


def test_a_missing_baseline_says_so(tmp_path, fake_gpu, monkeypatch, capsys):
    head = write_profile(tmp_path / "head", [100.0])
    rc = run_cli(head, "--baseline", str(tmp_path / "main.json"), "--count", "1000",
                 monkeypatch=monkeypatch)
    out = capsys.readouterr().out
    assert rc == 3
    assert f"no baseline: {tmp_path / 'main.json'} does not exist" in out


def test_a_driver_change_starts_a_new_baseline(tmp_path, fake_gpu, monkeypatch, capsys):
    head = write_profile(tmp_path / "head", [100.0] * 5)
    main = tmp_path / "main.json"
    assert run_cli(head, "--count", "1000", "--output", str(main), monkeypatch=monkeypatch) == 0
    assert "not gated" in capsys.readouterr().out
    monkeypatch.setenv("BENCH_FAKES_DRIVER", "555.42.02")
    rc = run_cli(head, "--baseline", str(main), "--count", "1000", monkeypatch=monkeypatch)
    out = capsys.readouterr().out
    assert rc == 3
    assert "hardware changed" in out and "driver 550.54.15" in out and "driver 555.42.02" in out
    # Same hardware again: the stored run is a valid baseline and equal energy passes.
    monkeypatch.delenv("BENCH_FAKES_DRIVER")
    assert run_cli(head, "--baseline", str(main), "--count", "1000",
                   monkeypatch=monkeypatch) == 0


def test_a_failing_command_is_a_clear_error_not_a_verdict(tmp_path, fake_gpu, monkeypatch,
                                                          capsys):
    head = write_profile(tmp_path / "head", [100.0], exit_status=3)
    rc = run_cli(head, "--count", "1000", monkeypatch=monkeypatch)
    err = capsys.readouterr().err
    assert rc == 2
    assert "the benchmark command failed with exit status 3 in warm-up 0 (head" in err
    assert "nothing was gated" in err


def test_a_command_that_does_not_write_its_count(tmp_path, fake_gpu, monkeypatch, capsys):
    head = write_profile(tmp_path / "head", [100.0])
    monkeypatch.chdir(head)
    rc = cli.main(["bench", "--workload", "ranker", "--nvml-lib", "tests.support.bench_fakes",
                   "--no-host-energy", "--warmup", "0", "--count-from", "result.json", "--",
                   sys.executable, "-c", "pass"])
    assert rc == 2
    assert "the command did not write" in capsys.readouterr().err


def test_simulated_runs_are_never_gated(tmp_path, fake_gpu, monkeypatch, capsys):
    base = write_profile(tmp_path / "base", [100.0])
    head = write_profile(tmp_path / "head", [100.0])
    monkeypatch.chdir(head)
    rc = cli.main(["bench", "--workload", "ranker", "--simulate", "1", "--warmup", "0",
                   "--repeat", "4", "--count", "10", "--base-dir", str(base),
                   "--output", str(tmp_path / "sim.json"), "--", *FAKE_BENCH])
    out = capsys.readouterr().out
    assert rc == 3
    assert "simulated GPUs: a simulated run is never gated" in out
    assert json.loads((tmp_path / "sim.json").read_text())["source"] == "simulated"


def test_latency_samples_give_p99_and_count_gives_throughput(tmp_path, fake_gpu):
    # 100 latencies 1..100 ms: p99 at rank (100-1)*0.99 = 98.01 -> 99 + 0.01*(100-99) = 99.01.
    head = write_profile(tmp_path / "head", [50.0], count=200,
                         latency_ms=[float(v) for v in range(1, 101)])
    settings = bench.Settings(FAKE_BENCH, [0], count_from=Path("result.json"),
                              usd_per_hour=3.6, grid_intensity_g_per_kwh=400.0)
    source = NvmlSource(CounterFileNvml(fake_gpu))
    s = bench.run_once(settings, source, None, head, "head", 0)
    assert s["p99_ms"] == pytest.approx(99.01)
    assert s["count"] == 200
    assert s["gpu_energy_j"] == pytest.approx(50.0)
    assert s["energy_per_inference_j"] == pytest.approx(0.25)  # 50 J / 200
    assert s["throughput_per_s"] == pytest.approx(200 / s["wall_s"])
    # $3.60/h is $0.001/s; per 1k inferences: 0.001 * wall_s / 200 * 1000.
    assert s["cost_per_1k_usd"] == pytest.approx(0.001 * s["wall_s"] * 5)
    # 50 J = 1/72,000 kWh; x 400 g/kWh (PUE 1 when not given) = 0.2778 g.
    assert s["co2e_g"] == pytest.approx(50 / 3.6e6 * 400)
    assert s["it_energy_per_inference_j"] is None  # no CPU/RAM figure: unknown, never 0


def test_usage_errors(tmp_path, fake_gpu, monkeypatch, capsys):
    head = write_profile(tmp_path / "head", [1.0])
    assert run_cli(head, "--tolerance", "joules=5", monkeypatch=monkeypatch) == 2
    assert "--tolerance joules: one of energy_per_inference_j" in capsys.readouterr().err
    assert run_cli(head, "--baseline-branch", "main", monkeypatch=monkeypatch) == 2
    assert "--baseline-branch reads the server's history" in capsys.readouterr().err


class FakeHostEnergy:
    """codecarbon's place: CPU 40 W and RAM 10 W measured over each run (HostEnergySource)."""

    kind, version, cpu_method, ram_method = "codecarbon", "3.0.0", "rapl", "model"

    def __init__(self) -> None:
        self.starts = 0

    def start(self) -> None:
        self.starts += 1

    def read(self, dt_s: float):
        from collectors.host_energy import HostReading

        return HostReading(40.0, 40.0 * dt_s, 10.0, 10.0 * dt_s)


def test_cpu_and_ram_energy_are_recorded_but_not_gated(tmp_path, fake_gpu):
    head = write_profile(tmp_path / "head", [50.0], count=100)
    host = FakeHostEnergy()
    settings = bench.Settings(FAKE_BENCH, [0], count=100)
    s = bench.run_once(settings, NvmlSource(CounterFileNvml(fake_gpu)), host, head, "head", 0)
    assert host.starts == 1  # a fresh CPU baseline for every run
    # CPU + RAM: (40 + 10) W x wall time; IT energy per inference adds it to the GPU's 50 J.
    assert s["cpu_ram_energy_j"] == pytest.approx(50.0 * s["wall_s"])
    assert s["it_energy_per_inference_j"] == pytest.approx((50.0 + 50.0 * s["wall_s"]) / 100)
    assert s["energy_per_inference_j"] == pytest.approx(0.5)  # the gated figure: GPU only


def test_no_gpu_with_a_gate_asked_is_inconclusive_not_an_error(tmp_path, fake_gpu, monkeypatch,
                                                              capsys):
    head = write_profile(tmp_path / "head", [1.0])
    monkeypatch.chdir(head)
    report = tmp_path / "gate.md"
    # A module whose nvmlInit fails as on a runner without the driver (error 9, not loaded).
    monkeypatch.setenv("AGENT_FAKES_INIT_ERROR", "9")
    monkeypatch.setattr("tests.support.agent_fakes._module_fake", None)
    argv = ["bench", "--workload", "ranker", "--nvml-lib", "tests.support.agent_fakes",
            "--count", "10",
            "--no-host-energy", "--baseline", str(tmp_path / "main.json"), "--report",
            str(report), "--", *FAKE_BENCH]
    assert cli.main(argv) == 3
    out = capsys.readouterr().out
    assert "INCONCLUSIVE" in out and "no GPU: NVIDIA driver not found" in out
    assert "no GPU: NVIDIA driver not found" in report.read_text()
    assert not fake_gpu.exists()  # the benchmark never ran
    # Without a gate asked it is a usage error, as for `run`.
    assert cli.main([a for a in argv if a not in ("--baseline", str(tmp_path / "main.json"))]) \
        == 2
    assert "use --simulate N" in capsys.readouterr().err


def test_a_gpu_without_energy_counter_is_measured_by_power_but_not_gated(tmp_path, fake_gpu):
    head = write_profile(tmp_path / "head", [50.0], count=100)
    nvml = CounterFileNvml(fake_gpu)
    nvml.unsupported = {"nvmlDeviceGetTotalEnergyConsumption"}  # pre-Volta: no counter
    source = NvmlSource(nvml)
    settings = bench.Settings(FAKE_BENCH, [0], count=100)
    samples = [bench.run_once(settings, source, None, head, "head", i) for i in range(4)]
    assert {s["energy_method"] for s in samples} == {"power"}
    # The fake draws a constant 250 W: energy = 250 W x the sampled span (about the wall time).
    assert samples[0]["gpu_energy_j"] == pytest.approx(250.0 * samples[0]["wall_s"], rel=0.3)
    doc = {"source": "nvml", "hardware_key": "k", "samples": samples}
    baseline = bench.Baseline("same", [dict(s, role="base") for s in samples], "k")
    result = bench.gate_run(doc, baseline, {}, 0.05)
    assert result.rows[0].verdict == gate.INCONCLUSIVE
    assert "integrated from power readings" in result.rows[0].reason
