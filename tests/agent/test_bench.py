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
    head = write_profile(tmp_path / "head", [120.0, 120.9, 119.0, 120.5, 119.2], count=1000)
    report = tmp_path / "gate.md"
    out = tmp_path / "run.json"
    rc = run_cli(head, "--base-dir", str(base), "--repeat", "5", "--warmup", "1",
                 "--count-from", "result.json", "--report", str(report), "--output", str(out),
                 monkeypatch=monkeypatch)
    assert rc == 1
    doc = json.loads(out.read_text())
    # The fake GPU's counter rose by exactly each repeat's joules; 1,000 inferences a run:
    # base median 100.0 J -> 0.1000 J/inference, head median 120.0 J -> 0.1200.
    head_j = [s["gpu_energy_j"] for s in doc["samples"] if s["role"] == "head"]
    assert head_j == pytest.approx([120.0, 120.9, 119.0, 120.5, 119.2])
    assert [s["energy_method"] for s in doc["samples"]] == ["counter"] * 10
    # Pairs alternate AB BA AB BA AB, so a drifting runner favours neither side.
    assert [s["role"] for s in doc["samples"]] == ["base", "head", "head", "base"] * 2 + \
        ["base", "head"]
    row = doc["comparison"]["rows"][0]
    assert row["baseline"] == pytest.approx(0.1)
    assert row["current"] == pytest.approx(0.12)
    # Pair ratios 1.2000 1.2030 1.1960 1.2026 1.1944, no two equal, all above 1.05:
    # W+ = 15 of 15, one-sided p = 1/2^5 = 1/32; the change is their Hodges-Lehmann estimate.
    assert row["p_value"] == pytest.approx(1 / 32)
    assert 19.5 < row["change_pct"] < 20.3
    assert doc["comparison"]["paired"] is True
    assert row["verdict"] == gate.FAIL
    assert doc["comparison"]["verdict"] == gate.FAIL
    printed = capsys.readouterr().out
    assert "GreenOps efficiency gate: FAIL" in printed
    # The Markdown report is the same table the log shows.
    comparison = gate.Comparison.from_dict(doc["comparison"])
    assert report.read_text() == gate.render_markdown(comparison)
    assert f"| GPU energy per inference (J) | 0.1000 | 0.1200 | {row['change_pct']:+.1f} %" \
        in report.read_text()
    assert "5 interleaved pairs" in report.read_text()
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
    head = write_profile(tmp_path / "head", [106.0, 71.0, 137.0, 96.0, 116.0])  # +1.4..+6.7 %
    flags = ("--base-dir", str(base), "--count", "1000", "--warmup", "0", "--repeat", "5",
             "--max-repeat", "5")
    rc = run_cli(head, *flags, monkeypatch=monkeypatch)
    out = capsys.readouterr().out
    assert rc == 3
    assert "INCONCLUSIVE" in out and "not significantly beyond the 5 % tolerance" in out
    # --allow-inconclusive keeps the verdict on screen but does not fail the job.
    assert run_cli(head, *flags, "--allow-inconclusive", monkeypatch=monkeypatch) == 0


def test_an_undecided_gate_runs_more_pairs(tmp_path, fake_gpu, monkeypatch, capsys):
    base = write_profile(tmp_path / "base", [100.0, 70.0, 130.0, 90.0, 110.0])
    head = write_profile(tmp_path / "head", [106.0, 71.0, 137.0, 96.0, 116.0])
    out_file = tmp_path / "run.json"
    run_cli(head, "--base-dir", str(base), "--count", "1000", "--warmup", "0", "--repeat", "5",
            "--max-repeat", "8", "--repeat-step", "3", "--output", str(out_file),
            monkeypatch=monkeypatch)
    err = capsys.readouterr().err
    assert "undecided after 5 pairs" in err and "3 more" in err
    doc = json.loads(out_file.read_text())
    assert doc["settings"]["repeat"] == 8
    assert sorted(s["index"] for s in doc["samples"] if s["role"] == "head") == list(range(8))
    assert doc["comparison"]["pairs"] == 8


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


def test_no_gpu_with_a_gate_asked_is_its_own_exit_code(tmp_path, fake_gpu, monkeypatch, capsys):
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
    assert cli.main(argv) == bench.EXIT_NO_GPU == 4
    out = capsys.readouterr().out
    assert "GreenOps efficiency gate: NO GPU" in out
    assert out.count("no GPU on this runner: NVIDIA driver not found") == 1  # said once
    assert "no GPU on this runner: NVIDIA driver not found" in report.read_text()
    assert "no gpu" in report.read_text().splitlines()[0]
    assert not fake_gpu.exists()  # the benchmark never ran
    # --allow-inconclusive is for a gate that measured and could not decide; a gate that
    # never measured would pass every change, so it still exits 4.
    assert cli.main([*argv[:-3], "--allow-inconclusive", *argv[-3:]]) == 4
    capsys.readouterr()
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


# --- verdicts survive: uploads, settings, labels, interleaving from git ------------------------


class FakeServer:
    """A GreenOps server on loopback that stores each posted run (201, or 200 for a resend)."""

    def __init__(self) -> None:
        import http.server
        import threading

        runs = self.runs = {}

        class Handler(http.server.BaseHTTPRequestHandler):
            def do_POST(self):  # noqa: N802
                doc = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
                created = doc["run_id"] not in runs
                runs[doc["run_id"]] = doc
                body = json.dumps({"id": len(runs), "url": f"/runs/{len(runs)}"}).encode()
                self.send_response(201 if created else 200)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def log_message(self, *args):
                pass

        self.httpd = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.httpd.server_address[1]}"
        self.thread = threading.Thread(target=self.httpd.serve_forever, daemon=True)
        self.thread.start()

    def close(self) -> None:
        self.httpd.shutdown()
        self.httpd.server_close()


def _closed_port() -> str:
    import socket

    with socket.socket() as s:  # bound, never listening: a connection is refused at once
        s.bind(("127.0.0.1", 0))
        return f"http://127.0.0.1:{s.getsockname()[1]}"


def test_a_failed_upload_keeps_the_verdict_and_is_sent_by_the_next_run(tmp_path, fake_gpu,
                                                                       monkeypatch, capsys):
    base = write_profile(tmp_path / "base", [100.0, 100.5, 99.5, 100.2, 99.8])
    head = write_profile(tmp_path / "head", [120.0, 120.9, 119.0, 120.5, 119.2])
    spool = tmp_path / "spool"
    report = tmp_path / "gate.md"
    flags = ("--base-dir", str(base), "--count", "1000", "--warmup", "0", "--repeat", "5",
             "--token", "gha_test", "--spool-dir", str(spool), "--report", str(report))
    # The server is down: the verdict (fail) still decides the exit code, not the upload.
    rc = run_cli(head, *flags, "--server", _closed_port(), monkeypatch=monkeypatch)
    captured = capsys.readouterr()
    assert rc == 1
    assert "warning: cannot reach" in captured.err and "the verdict stands" in captured.err
    spooled = list(spool.glob("*.json"))
    assert len(spooled) == 1
    assert "spooled as" in report.read_text() and "next run" in report.read_text()
    first_id = json.loads(spooled[0].read_text())["run_id"]
    # The next run, server up: the spooled run goes first, then the new one.
    server = FakeServer()
    try:
        rc = run_cli(head, *flags, "--server", server.url, monkeypatch=monkeypatch)
    finally:
        server.close()
    assert rc == 1
    assert "sent 1 spooled run(s)" in capsys.readouterr().err
    assert first_id in server.runs and len(server.runs) == 2
    assert not list(spool.glob("*.json"))
    assert "spooled" not in report.read_text()


def test_an_unreachable_server_for_the_baseline_is_inconclusive(tmp_path, fake_gpu, monkeypatch,
                                                                capsys):
    head = write_profile(tmp_path / "head", [100.0] * 5)
    rc = run_cli(head, "--baseline-branch", "main", "--server", _closed_port(), "--token", "t",
                 "--spool-dir", str(tmp_path / "spool"), "--count", "1000", "--warmup", "0",
                 "--repeat", "5", monkeypatch=monkeypatch)
    out = capsys.readouterr().out
    assert rc == 3
    assert "no baseline: cannot reach" in out
    assert len(list((tmp_path / "spool").glob("*.json"))) == 1  # the run itself is kept


def test_differing_settings_are_named_and_only_their_kpis_are_inconclusive(
        tmp_path, fake_gpu, monkeypatch, capsys):
    main_dir = write_profile(tmp_path / "main", [100.0, 100.5, 99.5, 100.2, 99.8])
    head = write_profile(tmp_path / "head", [100.3, 99.6, 100.1, 99.9, 100.4])
    main = tmp_path / "main.json"
    assert run_cli(main_dir, "--count", "1000", "--warmup", "0", "--repeat", "5",
                   "--usd-per-hour", "2.5", "--output", str(main), monkeypatch=monkeypatch) == 0
    capsys.readouterr()
    rc = run_cli(head, "--baseline", str(main), "--count", "1000", "--warmup", "0",
                 "--repeat", "5", "--gate", "cost_per_1k_usd", monkeypatch=monkeypatch)
    out = capsys.readouterr().out
    # Cost per 1k cannot be compared (and is gated here: inconclusive, exit 3); energy can,
    # and is within tolerance.
    assert rc == 3
    cost = next(line for line in out.splitlines() if line.startswith("Cost per 1k"))
    assert "--usd-per-hour differs (baseline: 2.5; this run: not given)" in cost
    energy = next(line for line in out.splitlines() if line.startswith("GPU energy"))
    assert "pass" in energy
    assert out.count("Settings differ: --usd-per-hour") == 1
    assert "this comparison crosses time" in out
    # Not gated on cost (the default): the energy decides, and the difference is a note.
    assert run_cli(head, "--baseline", str(main), "--count", "1000", "--warmup", "0",
                   "--repeat", "5", monkeypatch=monkeypatch) == 0


def test_labels_outside_a_git_checkout_say_what_is_unknown(tmp_path, fake_gpu, monkeypatch,
                                                            capsys):
    base = write_profile(tmp_path / "base", [100.0] * 5)
    head = write_profile(tmp_path / "head", [100.0] * 5)
    main = tmp_path / "main.json"

    def bench_here(*flags):
        monkeypatch.chdir(head)
        return cli.main(["bench", "--workload", "ranker", "--nvml-lib", "tests.support.bench_fakes",
                         "--no-host-energy", "--count", "1000", "--warmup", "0", "--repeat",
                         "5", "--tolerance", "throughput_per_s=100", *flags, "--",
                         *FAKE_BENCH])

    bench_here("--output", str(main))  # tmp_path is no git checkout: no commit, no branch
    assert json.loads(main.read_text())["commit"] == ""
    capsys.readouterr()
    bench_here("--baseline", str(main))
    baseline_line = capsys.readouterr().out.splitlines()[1]
    assert baseline_line.startswith("baseline: a run with no commit or branch recorded (file ")
    assert "?" not in baseline_line and "measured 20" in baseline_line
    bench_here("--base-dir", str(base))
    baseline_line = capsys.readouterr().out.splitlines()[1]
    assert baseline_line == (f"baseline: {base} (not a git checkout: commit unknown), "
                             "interleaved with this run on this runner")


def _git(repo: Path, *args: str) -> str:
    import subprocess

    return subprocess.run(["git", "-c", "user.name=t", "-c", "user.email=t@example.com", *args],
                          cwd=repo, check=True, capture_output=True, text=True).stdout.strip()


def test_base_ref_interleaves_the_merge_base_from_git(tmp_path, fake_gpu, monkeypatch, capsys):
    repo = tmp_path / "repo"
    write_profile(repo / "bench", [100.0, 100.5, 99.5, 100.2, 99.8])
    _git(repo, "init", "-q", "-b", "main")
    _git(repo, "add", "-A")
    _git(repo, "commit", "-qm", "base")
    base_sha = _git(repo, "rev-parse", "HEAD")
    _git(repo, "checkout", "-qb", "feature")
    write_profile(repo / "bench", [120.0, 120.9, 119.0, 120.5, 119.2])
    _git(repo, "commit", "-qam", "bigger model")
    out_file = tmp_path / "run.json"
    # Run from a subdirectory of the checkout: the base is checked out at the same place.
    monkeypatch.chdir(repo / "bench")
    rc = cli.main(["bench", "--workload", "ranker", "--nvml-lib", "tests.support.bench_fakes",
                   "--no-host-energy", "--count", "1000", "--warmup", "0", "--repeat", "5",
                   "--tolerance", "throughput_per_s=100", "--base-ref", "main",
                   "--output", str(out_file), "--", *FAKE_BENCH])
    out = capsys.readouterr().out
    assert rc == 1
    assert f"baseline: merge base {base_sha[:12]}, interleaved" in out
    doc = json.loads(out_file.read_text())
    assert doc["base_commit"] == base_sha and doc["branch"] == "feature"
    base_j = [s["gpu_energy_j"] for s in doc["samples"] if s["role"] == "base"]
    assert base_j == pytest.approx([100.0, 100.5, 99.5, 100.2, 99.8])
    assert len(_git(repo, "worktree", "list").splitlines()) == 1  # the temporary one is gone


def test_base_ref_falls_back_to_the_stored_baseline_and_says_so(tmp_path, fake_gpu, monkeypatch,
                                                                capsys):
    head = write_profile(tmp_path / "head", [100.0, 100.5, 99.5, 100.2, 99.8])
    main = tmp_path / "main.json"
    assert run_cli(head, "--count", "1000", "--warmup", "0", "--repeat", "5", "--output",
                   str(main), monkeypatch=monkeypatch) == 0
    capsys.readouterr()
    rc = run_cli(head, "--base-ref", "origin/main", "--baseline", str(main), "--count", "1000",
                 "--warmup", "0", "--repeat", "5", monkeypatch=monkeypatch)
    out = capsys.readouterr().out
    assert rc == 0
    assert "Interleaving was impossible (--base-ref origin/main: no merge base" in out
    assert "this comparison crosses time" in out
