"""Communication-bound multi-GPU work (issue 33 item 3): each GPU's NVLink (or PCIe) traffic
against its own model's published rate while its SMs wait, and what the month's waiting costs,
with samples as the agent sends them (NVML's NVLink counters or dcgm-exporter's
DCGM_FI_PROF_NVLINK_*_BYTES, both as wire columns nvlink_tx/rx_kib_s)."""

from __future__ import annotations

import pytest

from greenops.advisor import diagnose
from tests.support.advisor import profile_batch

GB_KIB = 1e9 / 1024  # KiB/s in one GB/s


def week():
    return diagnose.window("week")


def per_gpu(doc: dict, column: str, values: list[float]) -> dict:
    """Set `column` per GPU index (profile_batch sets one value for all)."""
    cols = doc["samples"]
    cols[column] = [values[g] for g in cols["gpu_index"]]
    return doc


@pytest.mark.django_db
def test_three_of_four_gpus_wait_on_nvlink(serve):  # noqa: F811
    wl, host, send = serve(instance_type="p5.48xlarge", gpu_name="NVIDIA H100 80GB HBM3")
    wl.kind = "training"
    wl.save()
    doc = profile_batch(
        util=90.0,
        mem_util=30.0,
        throttle=0x0,
        power=450.0,
        limit=700.0,
        extra={"tensor_active_pct": 30.0, "dram_active_pct": 30.0},
    )
    # GPUs 0-2 receive 300 GB/s and send 250 GB/s with their SMs 40 % active; GPU 3 receives
    # 50 GB/s at 86 % active. Means: RX (3 x 300 + 50) / 4 = 237.5 GB/s = 53 % of the H100
    # SXM's 900 / 2 = 450 GB/s each way; SM active (3 x 40 + 86) / 4 = 51.5 %.
    per_gpu(doc, "nvlink_rx_kib_s", [300 * GB_KIB] * 3 + [50 * GB_KIB])
    per_gpu(doc, "nvlink_tx_kib_s", [250 * GB_KIB] * 3 + [40 * GB_KIB])
    per_gpu(doc, "sm_active_pct", [40.0, 40.0, 40.0, 86.0])
    send(doc)
    advice = diagnose.advise(wl, week())
    d = next(d for d in advice.diagnoses if d.key == "nvlink_bound")
    assert d.title == "Communication-bound (NVLink)"
    assert d.evidence[0] == (
        "NVLink received (RX) 237.5 GB/s on average, 53 % of the NVIDIA "
        "H100 SXM's published 450 GB/s each way"
    )
    assert d.evidence[1].startswith("SM active (DCGM) 51.5 % (below 80 %)")
    assert d.evidence[2] == (
        "3 of 4 GPUs each moved at least 50 % of their model's published "
        "NVLink rate while below 80 % busy (per GPU below)"
    )
    rows = d.per_gpu
    assert [r["gpu"] for r in rows] == [
        "inference-1 · 0",
        "inference-1 · 1",
        "inference-1 · 2",
        "inference-1 · 3",
    ]
    assert rows[0]["rx_gb_s"] == pytest.approx(300.0) and rows[0]["tx_gb_s"] == pytest.approx(250.0)
    assert rows[0]["rate_gb_s"] == pytest.approx(450.0)
    assert rows[0]["share_pct"] == pytest.approx(300 / 450 * 100)  # 66.7 %
    assert rows[3]["share_pct"] == pytest.approx(50 / 450 * 100)  # 11.1 %
    assert [r["bound"] for r in rows] == [True, True, True, False]
    assert rows[3]["busy_pct"] == pytest.approx(86.0) and rows[3]["busy_label"] == "SM active"
    # The month: make_batch's 200 + 10 g W over 29 intervals of 60 s on 4 GPUs = 29 x 60 x
    # 860 = 1,496,400 J in 1,800 measured seconds (120 GPU-minutes / 4), x 2,592,000 / 1,800
    # = 598.56 kWh. The SMs idle 100 - 51.5 = 48.5 % of it: 290.3016 kWh; the same share of
    # the month's CO2e and cost.
    assert advice.monthly.kwh == pytest.approx(598.56)
    assert d.waiting.kwh_per_month == pytest.approx(598.56 * 0.485)
    assert d.waiting.co2e_kg_per_month == pytest.approx(advice.monthly.co2e_kg * 0.485)
    assert d.waiting.usd_per_month == pytest.approx(advice.monthly.usd * 0.485)
    assert d.waiting.basis == "measured"
    # Fewer GPUs: ceil(4 x 51.5 / 70) = ceil(2.94) = 3 of 4, a quarter of the month.
    assert d.effect.kwh_per_month == pytest.approx(-598.56 * 0.25)
    assert any(lever.startswith("compress what is exchanged") for lever in d.levers)
    assert any(lever.startswith("fewer GPUs") for lever in d.levers)
    assert any("NVLink-connected" in lever for lever in d.levers)


@pytest.mark.django_db
def test_training_over_pcie_without_nvlink_is_communication(serve):  # noqa: F811
    # L40S: no NVLink; PCIe Gen4 64 GB/s both ways = 32 GB/s = 31,250,000 KiB/s each way.
    # 20,000,000 KiB/s = 64 % of it at 50 % utilisation (NVML only: no DCGM here).
    wl, host, send = serve(instance_type="g6e.12xlarge", gpu_name="NVIDIA L40S")
    wl.kind = "training"
    wl.save()
    send(
        profile_batch(
            util=50.0,
            mem_util=30.0,
            throttle=0x0,
            pcie_rx=20_000_000.0,
            pcie_tx=1_000.0,
            limit=350.0,
        )
    )
    advice = diagnose.advise(wl, week())
    d = next(d for d in advice.diagnoses if d.key == "pcie_bound")
    assert d.title == "Communication- or input-bound (PCIe, no NVLink)"
    assert "64 % of the NVIDIA L40S's published 32 GB/s each way" in d.evidence[0]
    assert d.per_gpu[0]["busy_label"] == "utilisation"
    assert d.per_gpu[0]["rate_gb_s"] == pytest.approx(32.0)
    # 20,000,000 KiB/s x 1024 / 1e9 = 20.48 GB/s
    assert d.per_gpu[0]["rx_gb_s"] == pytest.approx(20.48)
    # Waiting: 100 - 50 = 50 % of the month.
    assert d.waiting.kwh_per_month == pytest.approx(advice.monthly.kwh * 0.5)
    # The same traffic for an inference service is input, not communication.
    wl.kind = "inference"
    wl.save()
    d = next(d for d in diagnose.advise(wl, week()).diagnoses if d.key == "pcie_bound")
    assert d.title == "Input-bound (PCIe)"


@pytest.mark.django_db
def test_page_shows_per_gpu_links_and_the_waiting(client, team_roles, team, serve):  # noqa: F811
    wl, host, send = serve(instance_type="p5.48xlarge", gpu_name="NVIDIA H100 80GB HBM3")
    send(
        profile_batch(
            util=85.0,
            mem_util=30.0,
            throttle=0x0,
            power=450.0,
            limit=700.0,
            extra={
                "nvlink_rx_kib_s": 300 * GB_KIB,
                "nvlink_tx_kib_s": 250 * GB_KIB,
                "sm_active_pct": 40.0,
                "tensor_active_pct": 30.0,
                "dram_active_pct": 30.0,
            },
        )
    )
    client.force_login(team_roles["viewer"])
    html = client.get(
        f"/teams/{team.slug}/advisor/workloads/{wl.slug}/?range=week"
    ).content.decode()
    assert 'id="per-gpu-nvlink_bound"' in html
    assert 'id="waiting-nvlink_bound"' in html
    # 598.56 kWh x (100 - 40) % = 359.1 kWh of waiting a month.
    assert "359.1 kWh" in html
    assert "4 of 4 GPUs each moved at least 50 %" in html
    assert ('<tr id="row-nvlink"><td>NVLink TX / RX (NVML or DCGM)</td><td class="num">'
            "250.0 / 300.0 GB/s") in html
