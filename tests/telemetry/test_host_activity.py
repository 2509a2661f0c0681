"""Host activity (issue 14): CPU, network and disk from /proc, NVLink and max clocks and the
processes on each GPU from NVML, through POST /api/v1/host-samples and the inventory into
HostSample, HostHour, GpuProcess and Gpu, with hand-computed figures.

The /proc and /sys files are written in the kernel's own layouts (proc(5): /proc/stat's cpu
line, /proc/net/dev's two header lines then one line per interface, /proc/diskstats' 14+
fields per device with sectors at fields 6 and 10).
"""

from __future__ import annotations

import time
from pathlib import Path

import orjson
import pytest

from collectors.host_activity import (
    HOST_SAMPLES_PATH,
    Counters,
    HostActivityChannel,
    gpu_processes,
    rates,
    read_counters,
)
from collectors.inventory import build_inventory
from collectors.sources import NvmlSource
from greenops.telemetry.models import Gpu, GpuProcess, HostHour, HostSample
from tests.support.agent_fakes import FakeNvml
from tests.support.host_activity import host_doc

NET_HEADER = ("Inter-|   Receive                                                |  Transmit\n"
              " face |bytes    packets errs drop fifo frame compressed multicast|bytes    packets "
              "errs drop fifo colls carrier compressed\n")


def write_proc(root: Path, stat: str, eth0: tuple[int, int], veth: tuple[int, int],
               nvme: tuple[int, int]) -> None:
    (root / "proc" / "net").mkdir(parents=True, exist_ok=True)
    (root / "proc" / "stat").write_text(f"{stat}\ncpu0 1 2 3 4 5 6 7 8 0 0\nintr 1\n")
    (root / "proc" / "net" / "dev").write_text(
        NET_HEADER
        + "    lo: 123456     100    0    0    0     0          0         0   123456     100"
          "    0    0    0     0       0          0\n"
        + f"  eth0: {eth0[0]} 800000 0 0 0 0 0 0 {eth0[1]} 400000 0 0 0 0 0 0\n"
        + f"vethabc: {veth[0]} 1 0 0 0 0 0 0 {veth[1]} 1 0 0 0 0 0 0\n")
    (root / "proc" / "diskstats").write_text(
        f" 259       0 nvme0n1 12345 0 {nvme[0]} 5000 6789 0 {nvme[1]} 9000 0 10000 14000 0 0 0 0\n"
        f" 259       1 nvme0n1p1 12000 0 {nvme[0]} 4900 6700 0 {nvme[1]} 8900 0 9900 13800 0 0\n"
        f" 253       0 dm-0 12000 0 {nvme[0]} 4900 6700 0 {nvme[1]} 8900 0 9900 13800 0 0 0 0\n"
        f"   7       0 loop0 10 0 999999 1 0 0 0 0 0 1 1 0 0 0 0\n")
    for path in ("sys/class/net/eth0/device", "sys/class/net/lo", "sys/class/net/vethabc",
                 "sys/block/nvme0n1/device", "sys/block/dm-0", "sys/block/loop0"):
        (root / path).mkdir(parents=True, exist_ok=True)


def test_proc_counters_give_cpu_network_and_disk_rates(tmp_path):
    write_proc(tmp_path, "cpu  1000 0 500 8000 500 0 0 0 0 0", (1_000_000_000, 500_000_000),
               (5, 5), (2_000_000, 4_000_000))
    a = read_counters(tmp_path / "proc", tmp_path / "sys")
    # busy = total - idle - iowait = 10,000 - 8,500; only eth0 (veth has no device); only the
    # whole disk nvme0n1, in 512-byte sectors.
    assert a == Counters(1500, 10000, 1_000_000_000, 500_000_000, 2_000_000 * 512,
                         4_000_000 * 512)
    write_proc(tmp_path, "cpu  1400 0 700 8300 600 0 0 0 0 0", (1_150_000_000, 530_000_000),
               (10**12, 10**12), (2_000_000 + 122_880, 4_000_000 + 30_720))
    b = read_counters(tmp_path / "proc", tmp_path / "sys")
    r = rates(a, b, 15.0)
    # CPU: total 11,000 (+1,000), busy 2,100 (+600) -> 60 %.
    assert r["cpu_util_pct"] == pytest.approx(60.0)
    # eth0: +150,000,000 B / 15 s = 10,000,000 B/s received; +30,000,000 / 15 = 2,000,000 sent.
    assert (r["net_rx_bytes_s"], r["net_tx_bytes_s"]) == (10_000_000.0, 2_000_000.0)
    # nvme0n1: 122,880 sectors x 512 B / 15 s = 4,194,304 B/s; 30,720 x 512 / 15 = 1,048,576.
    assert (r["disk_read_bytes_s"], r["disk_write_bytes_s"]) == (4_194_304.0, 1_048_576.0)
    # A counter that went down (an interface replaced) is unknown, not a negative or a 0.
    assert rates(b, a, 15.0)["net_rx_bytes_s"] is None


def test_nvml_nvlink_throughput_from_its_kib_counters_and_unsupported_stays_null():
    clock = iter([10.0, 12.0, 14.0])
    fake = FakeNvml(n=1, nvlink_kib_per_read=(2048, 1024))
    src = NvmlSource(lib=fake, clock=lambda: next(clock))
    first = src.read(0)  # t=10: no previous counters, no rate
    assert (first.nvlink_tx_kib_s, first.nvlink_rx_kib_s) == (None, None)
    # t=12: +2,048 KiB TX and +1,024 KiB RX over 2 s.
    r = src.read(0)
    assert (r.nvlink_tx_kib_s, r.nvlink_rx_kib_s) == (1024.0, 512.0)
    pcie_only = FakeNvml(n=1)  # the fields answer NOT_SUPPORTED, as on a PCIe card
    src2 = NvmlSource(lib=pcie_only)
    assert [src2.read(0).nvlink_tx_kib_s for _ in range(3)] == [None] * 3
    assert pcie_only.calls["nvmlDeviceGetFieldValues"] == 1 and "nvlink" in src2.unsupported(0)


def test_max_clocks_go_with_the_inventory():
    gpu = NvmlSource(lib=FakeNvml(n=1)).gpus()[0]
    assert (gpu.max_sm_clock_mhz, gpu.max_mem_clock_mhz) == (1410.0, 1215.0)
    old = FakeNvml(n=1, unsupported={"nvmlDeviceGetMaxClockInfo"})
    assert NvmlSource(lib=old).gpus()[0].max_sm_clock_mhz is None


def test_processes_with_their_gpu_memory(tmp_path):
    (tmp_path / "4242").mkdir()
    (tmp_path / "4242" / "comm").write_text("python3\n")
    fake = FakeNvml(n=2, processes={0: [(4242, 2 * 1024**3), (4243, None)]})
    procs = gpu_processes(NvmlSource(lib=fake), [0, 1], proc=tmp_path)
    assert [(p.gpu_index, p.pid, p.name, p.used_memory_mib) for p in procs] == [
        (0, 4242, "python3", 2048.0),  # 2 GiB in bytes -> MiB
        (0, 4243, None, None),  # another PID namespace, memory not reported: unknown
    ]


class FakeSpool:
    def __init__(self) -> None:
        self.put_docs: list[tuple[str, bytes, int, str]] = []

    def put(self, batch_id, payload, n, path):
        self.put_docs.append((batch_id, payload, n, path))


def test_the_channel_spools_readings_and_a_process_snapshot(tmp_path):
    readings = iter([Counters(0, 0, 0, 0, 0, 0), Counters(600, 1000, 150, 30, 60, 15)])
    mono = iter([100.0, 115.0])
    ch = HostActivityChannel(read=lambda: next(readings), interval_s=15.0,
                             processes=lambda: gpu_processes(
                                 NvmlSource(lib=FakeNvml(n=1, processes={0: [(7, 1024**2)]})),
                                 [0], proc=tmp_path),
                             clock=lambda: 1_700_000_000.0, monotonic=lambda: next(mono))
    ch.read_once()  # baseline (and the first process snapshot)
    spool = FakeSpool()
    assert ch.seal(spool) == 0  # nothing measured yet: the snapshot waits
    ch.read_once()
    assert ch.seal(spool) == 1
    (_, payload, n, path), = spool.put_docs
    from collectors import batch as wire

    doc = wire.decode(payload)
    assert (n, path) == (1, HOST_SAMPLES_PATH)
    assert doc["samples"]["cpu_util_pct"] == [60.0] and doc["samples"]["net_rx_bytes_s"] == [10.0]
    assert doc["processes"]["gpus"] == [{"gpu_index": 0, "pid": 7, "name": None,
                                         "used_memory_mib": 1.0, "namespace": None,
                                         "pod": None, "container": None}]


def post(client, token, doc):
    return client.post("/api/v1/host-samples", orjson.dumps(doc), content_type="application/json",
                       HTTP_AUTHORIZATION=f"Bearer {token}")




@pytest.mark.django_db
def test_host_samples_are_stored_and_rolled_up_per_host_hour(client, host):
    h, token = host
    t0 = (time.time() // 3600) * 3600 - 2 * 3600 + 60  # inside one hour, two hours back
    r = post(client, token, host_doc(t0))
    assert r.status_code == 200, r.content
    assert r.json()["inserted"] == 3
    assert HostSample.objects.filter(host=h).count() == 3
    hour = HostHour.objects.get(host=h)
    # CPU over the 30 s it was measured: 60 % x 15 s + 20 % x 15 s = 12 busy-s -> 40 %.
    assert (hour.cpu_s, hour.cpu_busy_s, hour.cpu_util_max) == (30.0, pytest.approx(12.0), 60.0)
    # Network: rows with both directions (1st and 3rd), 45 s: RX 1e7 x 15 + 5e6 x 30 = 3e8 B,
    # TX 2e6 x 15 + 1e6 x 30 = 6e7 B.
    assert (hour.net_s, hour.net_rx_bytes, hour.net_tx_bytes) == (45.0, 3e8, 6e7)
    assert (hour.net_rx_max_bytes_s, hour.net_tx_max_bytes_s) == (1e7, 2e6)
    # Disk over 60 s: 4,194,304 B/s x 30 s = 125,829,120 B read; 1,048,576 x 30 = 31,457,280.
    assert (hour.disk_s, hour.disk_read_bytes, hour.disk_write_bytes) == (
        60.0, 125_829_120.0, 31_457_280.0)
    procs = list(GpuProcess.objects.filter(host=h).order_by("gpu__index"))
    assert [(p.gpu.index, p.pid, p.name, p.used_memory_mib, p.pod) for p in procs] == [
        (0, None, "", None, "vllm-0"), (1, 4242, "python3", 2048.0, "")]
    # A replay stores nothing twice, and leaves the figures as they were.
    assert post(client, token, host_doc(t0)).json()["inserted"] == 0
    assert HostHour.objects.get(host=h).net_rx_bytes == 3e8


@pytest.mark.django_db
@pytest.mark.parametrize("path, value, field", [
    (("samples", "cpu_util_pct", 1), 101.0, "samples.cpu_util_pct[1]"),
    (("samples", "interval_s", 0), 0.0, "samples.interval_s[0]"),
    (("processes", "gpus", 0, "gpu_index"), 7, "processes.gpus[0].gpu_index"),
    (("processes", "gpus", 1, "pod"), "a\x00b", "processes.gpus[1].pod"),
])
def test_bad_host_samples_are_refused_by_name_and_nothing_is_stored(
        client, host, path, value, field):
    h, token = host
    doc = host_doc(time.time() - 600)
    node = doc
    for key in path[:-1]:
        node = node[key]
    node[path[-1]] = value
    r = post(client, token, doc)
    assert r.status_code == 422 and r.json()["field"] == field, r.content
    assert not HostSample.objects.filter(host=h).exists()
    assert not GpuProcess.objects.filter(host=h).exists()


@pytest.mark.django_db
def test_inventory_stores_the_max_clocks(client, host):
    h, token = host
    doc = build_inventory(NvmlSource(lib=FakeNvml(n=2)).gpus(), hostname="gpu-node-1")
    r = client.post("/api/v1/inventory", orjson.dumps(doc), content_type="application/json",
                    HTTP_AUTHORIZATION=f"Bearer {token}")
    assert r.status_code == 200, r.content
    g = Gpu.objects.get(host=h, index=0)
    assert (g.max_sm_clock_mhz, g.max_mem_clock_mhz) == (1410.0, 1215.0)


@pytest.mark.django_db
def test_the_host_page_shows_who_runs_on_each_gpu_and_the_host_activity(client, host, users):
    h, token = host
    assert post(client, token, host_doc(time.time() - 3 * 3600 + 60)).status_code == 200
    client.force_login(users["owner"])
    page = client.get(f"/teams/{h.team.slug}/hosts/{h.id}/").content.decode()
    assert "pod inference/vllm-0 (vllm)" in page and "python3 4242 · 2,048 MiB" in page
    # Means as in test_host_samples_are_stored_and_rolled_up_per_host_hour: CPU 12 busy-s over
    # 30 s = 40.0 %; RX 3e8 B / 45 s = 6.67 MB/s; read 125,829,120 B / 60 s = 2.10 MB/s.
    assert "40.0 % of all CPUs on average, 60.0 % at most" in page
    assert "6.67 MB/s in · 1.33 MB/s out" in page
    assert "2.10 MB/s read · 0.52 MB/s written" in page
