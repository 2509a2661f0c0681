"""The host around the GPUs (issue 14): host CPU, network and disk rates from the agent's
/proc readings (POST /api/v1/host-samples, as collectors/host_activity.py sends them). A host
CPU that is busy while the GPUs wait is input-bound; network and disk rates are shown but not
judged, since no NIC or disk capacity is collected; a host that did not report gives no
diagnosis that depends on it."""

from __future__ import annotations

import time
import uuid

import orjson
import pytest

from greenops.advisor import diagnose
from greenops.workloads.models import Workload
from tests.support.advisor import profile_batch
from tests.support.factories import make_host


def host_doc(start: float, n: int, cpu: float) -> dict:
    """`n` one-minute readings ending at start + 60, start + 120, ...; 120 MB/s in, 20 MB/s
    out, 300 MB/s read, 5 MB/s written."""
    return {"batch_id": str(uuid.uuid4()), "agent_version": "0.1.0", "samples": {
        "ts": [start + 60 * (i + 1) for i in range(n)], "interval_s": [60.0] * n,
        "cpu_util_pct": [cpu] * n, "net_rx_bytes_s": [120e6] * n,
        "net_tx_bytes_s": [20e6] * n, "disk_read_bytes_s": [300e6] * n,
        "disk_write_bytes_s": [5e6] * n}}


@pytest.fixture
def loader(team, client, post_batch):
    host, token = make_host(team, name="trainer-1", gpus=4)
    wl = Workload.objects.create(team=team, name="Trainer", slug="trainer", kind="training")
    wl.hosts.add(host)
    start = (time.time() // 3600) * 3600 - 3600  # in the last finished hour
    assert post_batch(token, profile_batch(util=40.0, mem_util=30.0, throttle=0x0,
                                           start=start)).status_code == 202

    def host_samples(n: int, cpu: float) -> None:
        r = client.post("/api/v1/host-samples", orjson.dumps(host_doc(start, n, cpu)),
                        content_type="application/json", HTTP_AUTHORIZATION=f"Bearer {token}")
        assert r.status_code == 200, r.content

    return wl, host_samples


@pytest.mark.django_db
def test_busy_host_cpu_with_waiting_gpus_is_input_bound(loader):
    wl, host_samples = loader
    host_samples(30, cpu=95.0)  # the 30 minutes the GPUs were measured
    advice = diagnose.advise(wl, diagnose.window("week"))
    d = next(d for d in advice.diagnoses if d.key == "host_cpu_bound")
    assert d.evidence[0] == "host CPU 95.0 % busy on average (all CPUs, at least 90 %)"
    assert d.evidence[1].startswith("GPU utilisation (NVML) 40.0 %")
    # Rates are evidence, time-weighted over the seconds measured: 120e6 B/s = 120.0 MB/s.
    assert d.evidence[2] == "network in 120.0 MB/s, out 20.0 MB/s"
    assert d.evidence[3] == "disk read 300.0 MB/s, write 5.0 MB/s"
    # ceil(4 x 40 / 70) = 3 of 4 GPUs: a quarter of the measured 598.56 kWh, an upper bound.
    assert d.effect.kwh_per_month == pytest.approx(-598.56 * 0.25)
    assert ("host network/disk-bound: the NIC's and disks' capacities are not collected, so "
            "saturation is not judged") in advice.skipped


@pytest.mark.django_db
def test_quiet_host_cpu_is_not_input_bound(loader):
    wl, host_samples = loader
    host_samples(30, cpu=35.0)
    advice = diagnose.advise(wl, diagnose.window("week"))
    assert "host_cpu_bound" not in {d.key for d in advice.diagnoses}


@pytest.mark.django_db
def test_host_that_reported_half_the_time_gives_no_host_diagnosis(loader):
    wl, host_samples = loader
    host_samples(15, cpu=95.0)  # 900 of the 1,800 s the GPUs were measured
    advice = diagnose.advise(wl, diagnose.window("week"))
    assert "host_cpu_bound" not in {d.key for d in advice.diagnoses}
    assert "host CPU: reported for 50 % of the measured time" in advice.skipped


@pytest.mark.django_db
def test_no_host_samples_no_host_diagnosis(loader):
    wl, _ = loader
    advice = diagnose.advise(wl, diagnose.window("week"))
    assert "host CPU: reported for 0 % of the measured time" in advice.skipped


@pytest.mark.django_db
def test_page_shows_the_host_beside_the_gpus(client, team_roles, team, loader):
    wl, host_samples = loader
    host_samples(30, cpu=95.0)
    client.force_login(team_roles["viewer"])
    html = client.get(f"/teams/{team.slug}/advisor/workloads/{wl.slug}/?range=week"
                      ).content.decode()
    assert 'id="diagnosis-host_cpu_bound"' in html
    row = html.split('id="row-host-net"')[1].split("</tr>")[0]
    assert "120.0 / 20.0 MB/s" in row and "1,800 s measured" in row
