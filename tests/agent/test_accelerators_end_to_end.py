"""Each new accelerator source end to end (issue 33): its fixture -> the agent's readings,
interval energy and batch -> POST /inventory and /samples -> rollups -> the host page, which
names each device by its kind and model and shows its energy and how it was measured.

The samples sit in the last finished hour (the host page's figures count whole finished
hours). Hand-computed energies (the sources' own tests derive the intervals):
* AMD (amd_smi_metric_1..3, 10 s apart): GPU 0 6,150 J (counter) + 6,100 J (power, across
  the accumulator's reset) = 12,250 J = 3.403 Wh; GPU 1 1,550 + 1,650 = 3,200 J = 0.889 Wh.
* Inferentia2 (neuron_monitor_inf2.jsonl, reports every 5 s; sysfs 27.5 % of 400 W = 110 W):
  reports 1, 2, 3 at 0, 5, 10 s, the cut report at 15 s gives nothing, report 5 at 20 s:
  110 W x 5 s + 110 x 5 + 110 x 10 = 2,200 J = 0.611 Wh, integrated power.
* Jetson AGX Orin (tegrastats_orin.txt, 1 s apart): 25.462 + 41.58 = 67.042 J = 0.0186 Wh,
  printed "0.019 Wh", integrated power.
"""

from __future__ import annotations

import json
import time

import pytest

from collectors import batch as wire
from collectors.amd import AmdSmiSource
from collectors.energy import EnergyAccountant
from collectors.inventory import build_inventory
from collectors.jetson import JetsonSource
from collectors.neuron import NeuronSource
from greenops.telemetry.models import Gpu, GpuHour
from tests.support import DATA
from tests.support.factories import make_host

AMD_METRICS = [(DATA / f"amd_smi_metric_{n}.json").read_text() for n in ("1", "2", "3_reset")]
NEURON = (DATA / "neuron_monitor_inf2.jsonl").read_text().splitlines()
ORIN = (DATA / "tegrastats_orin.txt").read_text().splitlines()
TS = 1764864000


def last_finished_hour_start() -> float:
    return (time.time() // 3600) * 3600 - 3600 + 600  # 10 min into the last finished hour


def agent_batch(source, ticks, max_gap_s: float) -> dict:
    """What Agent.sample_once does each tick, at fixed times: read every device, turn its
    reading into interval energy, buffer it; then the batch the agent would seal."""
    start = last_finished_hour_start()
    gpus = source.gpus()
    acct = EnergyAccountant(max_gap_s, {g.index: g.power_limit_w for g in gpus})
    buffer = wire.SampleBuffer()
    for t, before in ticks:
        if before is not None:
            before()
        for g in gpus:
            r = source.read(g.index)
            if r is None:
                continue
            energy_j, method = acct.update(g.index, t, r.energy_mj, r.power_w)
            buffer.append(start + t, g.index, r, energy_j, method)
    return wire.build_batch(buffer.columns(), source.kind)


def ship(client, post_batch, token: str, source, batch: dict) -> None:
    r = client.post(
        "/api/v1/inventory",
        json.dumps(build_inventory(source.gpus(), "edge-1")),
        content_type="application/json",
        HTTP_AUTHORIZATION=f"Bearer {token}",
    )
    assert r.status_code == 200, r.content
    r = post_batch(token, batch)
    assert r.status_code == 202, r.content


def host_page(client, users, team, host) -> str:
    client.force_login(users["owner"])
    r = client.get(f"/teams/{team.slug}/hosts/{host.id}/")
    assert r.status_code == 200
    return r.content.decode()


class Runs:
    def __init__(self, *metrics: str) -> None:
        self.metrics = list(metrics)

    def __call__(self, argv, timeout_s):
        if argv[1] == "metric":
            return self.metrics.pop(0)
        return (DATA / f"amd_smi_{argv[1]}.json").read_text()


@pytest.mark.django_db
def test_amd_instinct_end_to_end(client, users, team, post_batch):
    host, token = make_host(team, "mi300-1", gpus=0)
    source = AmdSmiSource(run=Runs(*AMD_METRICS))
    batch = agent_batch(source, [(0.0, None), (10.0, None), (20.0, None)], max_gap_s=50.0)
    assert batch["source"] == "amd-smi"
    ship(client, post_batch, token, source, batch)
    g0, g1 = Gpu.objects.filter(host=host).order_by("index")
    assert (g0.kind, g0.vendor, g0.name, g0.power_limit_w) == (
        "gpu",
        "amd",
        "AMD Instinct MI300X",
        750.0,
    )
    assert GpuHour.objects.get(gpu=g0).energy_j == pytest.approx(12250.0)
    assert GpuHour.objects.get(gpu=g1).energy_j == pytest.approx(3200.0)
    page = host_page(client, users, team, host)
    assert '<h2 id="devices-heading">GPUs</h2>' in page
    assert page.count('<strong class="device-model">AMD Instinct MI300X</strong>') == 2
    assert page.count('<div class="sub device-kind">GPU · AMD</div>') == 2
    assert "3.403 Wh" in page and "0.889 Wh" in page
    # GPU 0's counter reset once: its label says so; GPU 1's counter never did.
    assert "hardware energy counter; integrated power across its resets" in page
    assert '<div class="sub energy-method">hardware energy counter</div>' in page


@pytest.mark.django_db
def test_inferentia_end_to_end(client, users, team, post_batch, tmp_path):
    host, token = make_host(team, "inf2-1", gpus=0)
    power = tmp_path / "neuron0" / "stats" / "power"
    power.mkdir(parents=True)
    (power / "utilization").write_text(f"POWER_STATUS_VALID,{TS},20.00,35.00,27.50\n")
    source = NeuronSource(max_power_w=400.0, sysfs_root=tmp_path, wall=lambda: TS + 30.0)
    source.feed(NEURON[0])
    source.feed(NEURON[1])  # the first report: devices known, as NeuronSource waits for
    ticks = [(0.0, None)] + [
        (5.0 * k, lambda line=line: source.feed(line)) for k, line in enumerate(NEURON[2:], start=1)
    ]
    batch = agent_batch(source, ticks, max_gap_s=25.0)
    assert batch["source"] == "neuron-monitor"
    assert set(batch["samples"]["energy_method"]) == {None, "power"}  # never "counter"
    ship(client, post_batch, token, source, batch)
    [g] = Gpu.objects.filter(host=host)
    assert (g.kind, g.vendor, g.name) == ("ai-asic", "aws", "AWS Inferentia2")
    assert GpuHour.objects.get(gpu=g).energy_j == pytest.approx(2200.0)
    page = host_page(client, users, team, host)
    assert '<h2 id="devices-heading">Accelerators</h2>' in page
    assert '<div class="sub device-kind">AI accelerator · AWS</div>' in page
    assert "0.611 Wh" in page
    assert '<div class="sub energy-method">integrated power (no counter)</div>' in page
    assert "<th>Accelerator 0</th>" in page  # the power table's column
    assert ">GPU 0<" not in page and '<h2 id="devices-heading">GPUs' not in page
    # The team home names the team's devices the same way, cards and chart lines alike.
    home = client.get(f"/teams/{team.slug}/").content.decode()
    assert '<h2 id="charts">Accelerators</h2>' in home
    assert "Avg accelerator utilisation" in home and "Accelerator energy" in home
    assert "inf2-1 · accelerator 0" in home and "GPU utilisation" not in home


@pytest.mark.django_db
def test_jetson_end_to_end(client, users, team, post_batch):
    host, token = make_host(team, "orin-1", gpus=0)
    source = JetsonSource(model="NVIDIA Jetson AGX Orin 64GB")
    ticks = [(float(t), lambda line=line: source.feed(line)) for t, line in enumerate(ORIN)]
    batch = agent_batch(source, ticks, max_gap_s=5.0)
    assert batch["source"] == "tegrastats"
    ship(client, post_batch, token, source, batch)
    [g] = Gpu.objects.filter(host=host)
    assert (g.kind, g.vendor, g.memory_total_mib) == ("edge-soc", "nvidia", 62840)
    assert GpuHour.objects.get(gpu=g).energy_j == pytest.approx(67.042)
    page = host_page(client, users, team, host)
    assert '<h2 id="devices-heading">Edge modules</h2>' in page
    assert '<strong class="device-model">NVIDIA Jetson AGX Orin 64GB</strong>' in page
    assert '<div class="sub device-kind">edge SoC · NVIDIA</div>' in page
    assert "0.019 Wh" in page
    assert '<div class="sub energy-method">integrated power (no counter)</div>' in page
    assert "(shared with the CPU)" in page
