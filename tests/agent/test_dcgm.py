"""dcgm-exporter as a GPU source (issue 14): its page -> readings -> wire -> stored columns and
rollups, beside NVML (profiling fields matched by UUID) or alone (energy from its mJ counter).

The pages in tests/data/dcgm_exporter_*.txt are laid out as dcgm-exporter 3.x prints them with
NVIDIA's etc/dcp-metrics-included.csv (SM_ACTIVE, SM_OCCUPANCY and NVLINK rows enabled) in
Kubernetes mode: the HELP/TYPE lines of the CSV, labels gpu, UUID, pci_bus_id, device,
modelName, Hostname, DCGM_FI_DRIVER_VERSION, container, namespace, pod; GPU 0 is shared by two
pods (its series repeat once per pod), GPU 1 reports no DCP (profiling) field and a DCGM blank
sentinel (2147483632, DCGM_INT32_BLANK) for DCGM_FI_DEV_MEM_COPY_UTIL. Page 2 is 15 s after
page 1; page 3 follows a driver reload (the energy counters restarted near zero).

Hand-computed figures (GPU 0 = GPU-9d0c..., GPU 1 = GPU-3e8a...):
* ratios x 100: SM active 0.62 -> 62 %, then 0.70 -> 70 %; occupancy 31 %, 35 %; tensor 18 %,
  22 %; DRAM 45 %, 55 %.
* bytes/s / 1024: PCIe TX 1,048,576 -> 1,024 KiB/s, RX 5,242,880 -> 5,120; NVLink TX
  2,147,483,648 -> 2,097,152 KiB/s, RX 1,073,741,824 -> 1,048,576; page 2 NVLink 0 / 0.
* memory total = FB_USED 40,960 + FB_FREE 40,000 + FB_RESERVED 537 = 81,497 MiB.
* energy, GPU 0: page 1 -> 2 the counter rose 31,043,186,671 - 31,035,686,671 = 7,500,000 mJ
  = 7,500 J; page 2 -> 3 it fell (reset), so power x dt: (487.75 + 500.25) / 2 x 15 s = 7,410 J.
  GPU 1: 20,001,500,000 - 20,000,000,000 mJ = 1,500 J; then (101.5 + 99.5) / 2 x 15 = 1,507.5 J.
"""

from __future__ import annotations

import time

import pytest

from collectors import batch as wire
from collectors.config import ConfigError, load_config
from collectors.dcgm import DcgmOverlay, DcgmScraper, DcgmSource, open_gpu_source, parse_page
from collectors.energy import COUNTER, POWER, EnergyAccountant
from collectors.prometheus import parse
from collectors.scrape import TargetError, parse_target
from collectors.sources import NvmlSource
from greenops.telemetry.models import GpuDay, GpuHour, GpuMinute, GpuSample
from tests.support import DATA
from tests.support.agent_fakes import FakeNvml
from tests.support.dcgm import URL, Clock, Pages

PAGES = [(DATA / name).read_text() for name in (
    "dcgm_exporter_1.txt", "dcgm_exporter_2.txt", "dcgm_exporter_3_reset.txt")]
A = "GPU-9d0c4a7e-31b5-2f4e-8c1a-6b2d0e5f7a91"  # the exporter's gpu="0"
B = "GPU-3e8a1f52-c7d4-9b06-a2e3-5f18c4b7d620"  # gpu="1": no profiling fields






def test_the_page_is_read_per_gpu_uuid_in_stored_units():
    page = parse_page(parse(PAGES[0]))
    assert set(page) == {A, B}
    a, b = page[A], page[B]
    assert (a.gpu, b.gpu, a.model) == (0, 1, "NVIDIA H100 80GB HBM3")
    assert a.values["sm_active_pct"] == pytest.approx(62.0)
    assert a.values["sm_occupancy_pct"] == pytest.approx(31.0)
    assert a.values["tensor_active_pct"] == pytest.approx(18.0)
    assert a.values["dram_active_pct"] == pytest.approx(45.0)
    assert (a.values["pcie_tx_kib_s"], a.values["pcie_rx_kib_s"]) == (1024.0, 5120.0)
    assert (a.values["nvlink_tx_kib_s"], a.values["nvlink_rx_kib_s"]) == (2097152.0, 1048576.0)
    assert (a.values["util_pct"], a.values["power_w"], a.values["mem_used_mib"]) == (
        87.0, 512.25, 40960.0)
    assert a.values["energy_mj"] == 31035686671
    assert a.memory_total_mib == 81497.0
    # Two pods share GPU 0: one value, both pods known.
    assert a.pods == {("inference", "vllm-llama-7f9c5d6b8-x2kqp", "vllm"),
                      ("inference", "vllm-llama-7f9c5d6b8-mtz4d", "vllm")}
    # GPU 1: no DCP fields on the page -> unknown, and the blank sentinel is no 2.1e9 %.
    for name in ("sm_active_pct", "tensor_active_pct", "nvlink_tx_kib_s", "mem_util_pct"):
        assert name not in b.values


def test_a_label_filter_keeps_only_matching_series():
    assert set(parse_page(parse(PAGES[0]), lambda labels: ("pod", "bert-finetune-0") in labels)
               ) == {B}
    assert DcgmScraper(URL, (("Hostname", "other-node"),), Pages(PAGES[0]))._keep(
        (("Hostname", "gpu-node-07"),)) is False


def test_dcgm_alone_energy_from_its_mj_counter_across_a_reset():
    clock = Clock()
    fetch = Pages(PAGES[0], PAGES[1], PAGES[1], PAGES[2])
    source = DcgmSource(DcgmScraper(URL, fetch=fetch), refresh_s=7.5, clock=clock)
    assert source.kind == "dcgm"
    gpus = source.gpus()
    assert [(g.index, g.uuid, g.memory_total_mib, g.power_limit_w) for g in gpus] == [
        (0, A, 81497, None), (1, B, 81497, None)]  # GPU 1: 1,024 + 79,936 + 537
    # max gap as the agent sets it with dcgm alone: 5 x the 15 s scrape interval.
    acct = EnergyAccountant(max_gap_s=75.0, power_limit_w={g.index: g.power_limit_w
                                                           for g in gpus})
    out = {0: [], 1: []}
    for t in (0.0, 15.0, 30.0, 45.0):  # the third page repeats the second: no new reading
        clock.now = t
        for i in (0, 1):
            r = source.read(i)
            if r is not None:
                out[i].append(acct.update(i, t, r.energy_mj, r.power_w))
    assert fetch.calls == 4
    # The reset interval spans 30 s (t=15 to t=45: t=30 brought nothing new), so power x dt
    # is twice the 15 s figure of the module docstring.
    assert out[0] == [(None, None), (7500.0, COUNTER), (7410.0 * 2, POWER)]
    assert out[1] == [(None, None), (1500.0, COUNTER), (1507.5 * 2, POWER)]


def test_an_unchanged_page_gives_no_reading_and_a_failed_scrape_no_figure():
    clock = Clock()

    def fetch(url: str, timeout_s: float) -> str:
        if fetch.calls == 1:
            fetch.calls += 1
            raise OSError("connection refused")
        fetch.calls += 1
        return PAGES[0]

    fetch.calls = 0
    source = DcgmSource(DcgmScraper(URL, fetch=fetch), refresh_s=1.0, clock=clock)
    assert source.read(0) is not None
    clock.now = 2.0  # the scrape fails: the last page stays, so nothing new is read
    assert source.read(0) is None and source.read(1) is not None and source.read(1) is None
    clock.now = 4.0  # the same page again
    assert source.read(0) is None


def test_beside_nvml_the_profiling_fields_join_by_uuid_not_by_index():
    # NVML numbers the GPUs the other way round from the exporter's gpu label.
    nvml = NvmlSource(lib=FakeNvml(n=2, uuids=[B, A]))
    clock = Clock()
    overlay = DcgmOverlay(nvml, DcgmScraper(URL, fetch=Pages(PAGES[0])), interval_s=15.0,
                          clock=clock)
    assert overlay.refresh()
    on_a, on_b = overlay.read(1), overlay.read(0)
    assert on_a.sm_active_pct == pytest.approx(62.0) and on_a.dram_active_pct == pytest.approx(45)
    assert on_a.power_w == 250.0  # NVML's figure (FakeNvml 250,000 mW), not DCGM's 512.25
    assert on_a.nvlink_tx_kib_s == 2097152.0  # NVML has no NVLink here: filled from DCGM
    assert on_b.sm_active_pct is None and on_b.tensor_active_pct is None
    assert overlay.pods()[1] == parse_page(parse(PAGES[0]))[A].pods
    clock.now = 3 * 15.0 + 1  # three scrape intervals without a good page: not used any more
    assert overlay.read(1).sm_active_pct is None
    overlay.close()


def test_open_gpu_source_falls_back_to_dcgm_alone_without_nvml():
    target = parse_target({"url": URL, "kind": "dcgm"}, "scrape[0]")
    source = open_gpu_source("tests.no_such_nvml_module", target, 15.0, fetch=Pages(PAGES[0]))
    assert isinstance(source, DcgmSource) and [g.uuid for g in source.gpus()] == [A, B]


def test_config_takes_one_dcgm_target_without_a_workload(tmp_path):
    t = parse_target({"url": URL, "kind": "dcgm", "labels": {"Hostname": "gpu-node-07"}}, "s")
    assert (t.kind, t.recipe, t.labels) == ("dcgm", None, (("Hostname", "gpu-node-07"),))
    with pytest.raises(TargetError, match="workload"):
        parse_target({"url": URL, "kind": "dcgm", "workload": "x"}, "s")
    cfg = tmp_path / "agent.toml"
    cfg.write_text(f'[[scrape]]\nurl = "{URL}"\nkind = "dcgm"\n'
                   f'[[scrape]]\nurl = "{URL}"\nkind = "dcgm"\n')
    with pytest.raises(ConfigError, match="at most one"):
        load_config({}, environ={}, config_file=str(cfg))


def test_nvml_only_batches_leave_the_profiling_columns_out():
    buf = wire.SampleBuffer()
    buf.append(1.0, 0, NvmlSource(lib=FakeNvml(n=1)).read(0), None, None)
    cols = buf.columns()
    assert not set(wire.PROFILE_FIELDS) & set(cols)
    assert list(cols) == [f for f in wire.FIELDS if f not in wire.PROFILE_FIELDS]


def dcgm_batch(start: float) -> dict:
    """The three pages read by a DcgmSource 15 s apart, as the agent batches them."""
    clock = Clock()
    source = DcgmSource(DcgmScraper(URL, fetch=Pages(*PAGES)), refresh_s=7.5, clock=clock)
    acct = EnergyAccountant(max_gap_s=75.0)
    buf = wire.SampleBuffer()
    for t in (0.0, 15.0, 30.0):
        clock.now = t
        for i in (0, 1):
            r = source.read(i)
            buf.append(start + t, i, r, *acct.update(i, t, r.energy_mj, r.power_w))
    return wire.build_batch(buf.columns(), source.kind)


@pytest.mark.django_db
def test_dcgm_readings_reach_raw_samples_and_every_rollup(host, post_batch):
    h, token = host
    start = (time.time() // 60) * 60 - 120  # three samples 15 s apart inside one minute
    r = post_batch(token, dcgm_batch(start))
    assert r.status_code == 202, r.content
    raw0 = list(GpuSample.objects.filter(gpu__host=h, gpu__index=0).order_by("ts"))
    assert [s.sm_active_pct for s in raw0] == pytest.approx([62.0, 70.0, 70.0])
    assert [s.nvlink_tx_kib_s for s in raw0] == [2097152.0, 0.0, 0.0]
    assert [s.simulated for s in raw0] == [False] * 3  # measured, by DCGM
    raw1 = list(GpuSample.objects.filter(gpu__host=h, gpu__index=1).order_by("ts"))
    assert [s.sm_active_pct for s in raw1] == [None] * 3  # unsupported: null, not 0
    assert [s.mem_util_pct for s in raw1] == [None] * 3  # DCGM's blank sentinel: null
    for model in (GpuMinute, GpuHour, GpuDay):
        g0 = model.objects.get(gpu__host=h, gpu__index=0)
        # 62 + 70 + 70; 31 + 35 + 35; 18 + 22 + 22; 45 + 55 + 55 -- over 3 samples each.
        assert (g0.sm_active_sum, g0.sm_active_n) == (pytest.approx(202.0), 3)
        assert (g0.sm_occupancy_sum, g0.sm_occupancy_n) == (pytest.approx(101.0), 3)
        assert (g0.tensor_active_sum, g0.tensor_active_n) == (pytest.approx(62.0), 3)
        assert (g0.dram_active_sum, g0.dram_active_n) == (pytest.approx(155.0), 3)
        assert (g0.nvlink_tx_sum_kib_s, g0.nvlink_rx_sum_kib_s, g0.nvlink_n) == (
            2097152.0, 1048576.0, 3)
        assert (g0.sm_clock_sum_mhz, g0.sm_clock_n) == (5940.0, 3)  # 1,980 MHz x 3
        assert (g0.mem_clock_sum_mhz, g0.mem_clock_n) == (7857.0, 3)  # 2,619 MHz x 3
        assert g0.energy_j == pytest.approx(7500.0 + 7410.0)
        g1 = model.objects.get(gpu__host=h, gpu__index=1)
        assert (g1.sm_active_n, g1.sm_active_sum, g1.nvlink_n, g1.mem_util_n) == (0, 0.0, 0, 0)
        assert g1.energy_j == pytest.approx(1500.0 + 1507.5)
    # A replay stores nothing twice.
    assert post_batch(token, dcgm_batch(start)).status_code == 202
    assert GpuMinute.objects.get(gpu__host=h, gpu__index=0).sm_active_n == 3


@pytest.mark.django_db
@pytest.mark.parametrize("column, value", [("sm_active_pct", 100.5), ("nvlink_rx_kib_s", -1.0)])
def test_bad_profiling_values_are_refused_by_name(host, post_batch, column, value):
    h, token = host
    doc = dcgm_batch((time.time() // 60) * 60 - 120)
    doc["samples"][column][3] = value
    r = post_batch(token, doc)
    assert r.status_code == 422 and r.json()["field"] == f"samples.{column}[3]"
    assert GpuSample.objects.filter(gpu__host=h).count() == 0


def test_doctor_says_what_the_exporter_page_measures():
    from collectors import doctor

    target = parse_target({"url": URL, "kind": "dcgm"}, "scrape[0]")
    ok, g0, g1 = doctor.check_dcgm(target, fetch=Pages(PAGES[0]))
    assert ok == doctor.Check(doctor.OK, "dcgm-exporter", f"{URL}: 2 GPU(s)")
    assert g0.status == doctor.OK and "sm_active_pct" in g0.detail
    assert g1.status == doctor.WARN and "not on the page: sm_active_pct" in g1.detail

    def down(url: str, timeout_s: float) -> str:
        raise OSError("connection refused")

    (fail,) = doctor.check_dcgm(target, fetch=down)
    assert fail.status == doctor.FAIL and "connection refused" in fail.detail
