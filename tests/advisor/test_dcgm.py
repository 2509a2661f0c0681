"""Diagnoses that rest on dcgm-exporter's profiling fields (issue 14), as the agent sends them
joined to NVML's samples (wire v1 columns sm_active_pct, tensor_active_pct, dram_active_pct,
nvlink_tx/rx_kib_s): memory-bandwidth-bound needs DRAM busy AND tensor pipes idle;
communication-bound needs NVLink near its published rate while the SMs wait; a field the host
did not report gives no diagnosis that depends on it."""

from __future__ import annotations

import pytest

from greenops.advisor import diagnose
from tests.support import DATA
from tests.support.advisor import profile_batch


def week():
    return diagnose.window("week")


@pytest.mark.django_db
def test_dram_busy_and_tensor_idle_is_memory_bound_by_dcgm(workload):  # noqa: F811
    wl, send = workload
    # NVML's memory utilisation says 40 % (not bound by it); DCGM says DRAM 75 % active with
    # the tensor pipes 10 % active: DCGM's finer figure decides, and the page says which.
    send(profile_batch(util=90.0, mem_util=40.0, throttle=0x0, power=280.0,
                       extra={"dram_active_pct": 75.0, "tensor_active_pct": 10.0,
                              "sm_active_pct": 85.0}))
    advice = diagnose.advise(wl, week())
    p = advice.profile
    assert (p.dram_active_pct, p.tensor_active_pct, p.dram_share) == (75.0, 10.0, 1.0)
    d = next(d for d in advice.diagnoses if d.key == "memory_bound")
    assert d.evidence[0] == ("DRAM interface active (DCGM DRAM_ACTIVE) 75.0 % of the time "
                             "(at least 60 %)")
    assert d.evidence[1] == "tensor pipes active 10.0 % (below 20 %)"
    # Upper bound, as with NVML: 90 % -> 45 % busy on the line through (90 %, 280 of 300 W)
    # and (100 %, 300 W): 0.93333 + 0.06667 x (0.45 - 0.9) / 0.1 = 0.63333 x 300 = 190 W.
    assert d.effect.kwh_per_month == pytest.approx(598.56 * (190 / 280 - 1))


@pytest.mark.django_db
def test_dram_busy_with_tensor_pipes_busy_is_not_memory_bound(workload):  # noqa: F811
    wl, send = workload
    send(profile_batch(util=90.0, mem_util=85.0, throttle=0x0, power=280.0,
                       extra={"dram_active_pct": 75.0, "tensor_active_pct": 45.0}))
    advice = diagnose.advise(wl, week())
    # NVML's 85 % would have called it; DCGM shows the tensor pipes working: not diagnosed.
    assert "memory_bound" not in {d.key for d in advice.diagnoses}


@pytest.mark.django_db
def test_dram_without_tensor_activity_diagnoses_nothing(workload):  # noqa: F811
    wl, send = workload
    # DRAM reported but not the tensor pipes: the signature cannot be checked, so no
    # memory-bound diagnosis (and no fall back to NVML's coarser figure behind DCGM's back).
    send(profile_batch(util=90.0, mem_util=85.0, throttle=0x0, power=280.0,
                       extra={"dram_active_pct": 75.0}))
    advice = diagnose.advise(wl, week())
    assert "memory_bound" not in {d.key for d in advice.diagnoses}


@pytest.mark.django_db
def test_nvlink_near_its_rate_while_sms_wait_is_communication_bound(serve):  # noqa: F811
    wl, host, send = serve(instance_type="p5.48xlarge", gpu_name="NVIDIA H100 80GB HBM3")
    # H100 SXM: NVLink 900 GB/s both ways = 450 GB/s = 439,453,125 KiB/s each way. Receiving
    # 300 GB/s (292,968,750 KiB/s) = 66.7 % of it while DCGM's SM activity is 40 %.
    send(profile_batch(util=85.0, mem_util=30.0, throttle=0x0, power=450.0, limit=700.0,
                       extra={"nvlink_rx_kib_s": 300e9 / 1024, "nvlink_tx_kib_s": 250e9 / 1024,
                              "sm_active_pct": 40.0, "tensor_active_pct": 30.0,
                              "dram_active_pct": 30.0}))
    advice = diagnose.advise(wl, week())
    d = next(d for d in advice.diagnoses if d.key == "nvlink_bound")
    assert d.evidence[0] == ("NVLink received (RX) 300.0 GB/s on average, 67 % of the NVIDIA "
                             "H100 SXM's published 450 GB/s each way")
    # NVML's 85 % utilisation would hide the wait; DCGM's SM activity shows it.
    assert d.evidence[1].startswith("SM active (DCGM) 40.0 %")
    # ceil(4 x 40 / 70) = 3 of 4 GPUs: a quarter of the month, as an upper bound.
    assert d.effect.kwh_per_month == pytest.approx(-advice.monthly.kwh * 0.25)


@pytest.mark.django_db
def test_no_nvlink_figures_no_nvlink_diagnosis(serve):  # noqa: F811
    wl, host, send = serve(instance_type="p5.48xlarge", gpu_name="NVIDIA H100 80GB HBM3")
    send(profile_batch(util=30.0, mem_util=30.0, throttle=0x0, extra={"sm_active_pct": 20.0}))
    advice = diagnose.advise(wl, week())
    assert "nvlink_bound" not in {d.key for d in advice.diagnoses}
    assert "NVLink: throughput reported by 0 % of samples" in advice.skipped


# ---- From dcgm-exporter's own text to a diagnosis ----------------------------------------

def exporter_pages(n: int) -> list[str]:
    """`n` pages a minute apart, from tests/data/dcgm_exporter_1.txt (dcgm-exporter 3.x, see
    tests/agent/test_dcgm.py) with GPU 0 ("GPU-9d0c...", an H100 SXM) set to a memory-bound
    profile: 90 % GPU_UTIL at 680 W, DRAM_ACTIVE 0.80, PIPE_TENSOR_ACTIVE 0.05, SM_ACTIVE
    0.60; its energy counter rising 680 W x 60 s = 40,800,000 mJ a minute. GPU 1 keeps its
    page: no profiling fields, MEM_COPY_UTIL blank (its counter rises too, so pages differ)."""
    import re

    page = (DATA / "dcgm_exporter_1.txt").read_text()
    values = {"DCGM_FI_DEV_GPU_UTIL": "90", "DCGM_FI_DEV_POWER_USAGE": "680.000000",
              "DCGM_FI_PROF_DRAM_ACTIVE": "0.800000",
              "DCGM_FI_PROF_PIPE_TENSOR_ACTIVE": "0.050000",
              "DCGM_FI_PROF_SM_ACTIVE": "0.600000"}
    out = []
    for k in range(n):
        lines = []
        for line in page.splitlines():
            name = line.split("{", 1)[0]
            if not line.startswith("#") and 'gpu="0"' in line:
                if name in values:
                    line = re.sub(r"\S+$", values[name], line)
                elif name == "DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION":
                    line = re.sub(r"\S+$", str(31035686671 + k * 40_800_000), line)
            elif name == "DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION" and 'gpu="1"' in line:
                line = re.sub(r"\S+$", str(20000000000 + k * 6_000_000), line)
            lines.append(line)
        out.append("\n".join(lines) + "\n")
    return out


@pytest.mark.django_db
def test_dcgm_exporter_text_to_a_memory_bound_diagnosis(team, post_batch):
    import time

    from collectors import batch as wire
    from collectors.dcgm import DcgmScraper, DcgmSource
    from collectors.energy import EnergyAccountant
    from greenops.telemetry.models import Gpu
    from greenops.workloads.models import Workload
    from tests.support.dcgm import URL, Clock, Pages
    from tests.support.factories import make_host

    n = 61  # 61 one-minute samples: 61 GPU-minutes, over the advisor's 60
    clock = Clock()
    source = DcgmSource(DcgmScraper(URL, fetch=Pages(*exporter_pages(n))), refresh_s=7.5,
                        clock=clock)
    acct = EnergyAccountant(max_gap_s=75.0)
    buf = wire.SampleBuffer()
    # Two hours back: the 61 minutes lie in finished hours (figures count whole finished hours).
    start = (time.time() // 3600) * 3600 - 2 * 3600
    for k in range(n):
        clock.now = 60.0 * k
        for i in (0, 1):
            r = source.read(i)
            buf.append(start + 60.0 * k, i, r, *acct.update(i, clock.now, r.energy_mj,
                                                             r.power_w))
    host, token = make_host(team, name="gpu-node-07", gpus=2)
    host.instance_type = "p5.48xlarge"
    host.save()
    Gpu.objects.filter(host=host).update(name="NVIDIA H100 80GB HBM3", power_limit_w=None)
    assert post_batch(token, wire.build_batch(buf.columns(), source.kind)).status_code == 202
    served = Workload.objects.create(team=team, name="vLLM", slug="vllm", kind="inference")
    served.gpus.add(Gpu.objects.get(host=host, index=0))
    advice = diagnose.advise(served, week())
    p = advice.profile
    assert (p.measured_minutes, p.util_pct, p.power_w) == (61, 90.0, 680.0)
    assert (p.dram_active_pct, p.tensor_active_pct) == (pytest.approx(80.0), pytest.approx(5.0))
    d = next(d for d in advice.diagnoses if d.key == "memory_bound")
    assert d.evidence[0].startswith("DRAM interface active (DCGM DRAM_ACTIVE) 80.0 %")
    # Energy from the exporter's counter: 60 intervals x 40,800 J = 2,448,000 J = 0.68 kWh
    # over 61 x 60 = 3,660 s; x 2,592,000 / 3,660 a month.
    assert advice.monthly.kwh == pytest.approx(0.68 * 2_592_000 / 3_660)
    # No enforced limit from DCGM: the H100 SXM's published 700 W caps the power line.
    # (90 %, 680/700 = 0.971429) to (100 %, 1): at 45 %, 0.971429 - 0.028571 x 4.5 =
    # 0.842857 x 700 = 590 W; energy x (590 / 680 - 1).
    assert d.effect.kwh_per_month == pytest.approx(advice.monthly.kwh * (590 / 680 - 1))
    # GPU 1 reports no profiling fields and a blank MEM_COPY_UTIL: nothing memory-bound.
    other = Workload.objects.create(team=team, name="BERT", slug="bert", kind="training")
    other.gpus.add(Gpu.objects.get(host=host, index=1))
    advice = diagnose.advise(other, week())
    assert "memory_bound" not in {d.key for d in advice.diagnoses}
    assert ("memory-bandwidth: memory utilisation reported by 0 % of samples, DCGM DRAM "
            "activity by 0 %") in advice.skipped
