"""Recommendations as pure functions, against figures worked out by hand in the comments."""

from __future__ import annotations

import pytest

from greenops.costs import recommend as rec

# p4d.24xlarge, us-east-1, from the bundled snapshot: on-demand and the P4 page's RI rates.
OD = 32.7726
RI_1Y = rec.CommitOption("Reserved instance 1y", 19.22, 1)
RI_3Y = rec.CommitOption("Reserved instance 3y", 11.57, 3)
WEEK = 168


def office_hours_week() -> list[int]:
    """8 hours a day, 5 days a week: 40 of 168 hours with one instance running."""
    return [1 if day < 5 and 9 <= hour < 17 else 0 for day in range(7) for hour in range(24)]


def test_break_even_is_commit_rate_over_on_demand():
    assert rec.break_even_utilisation(11.57, OD) == pytest.approx(0.353039, rel=1e-5)
    assert rec.break_even_utilisation(19.22, OD) == pytest.approx(0.586465, rel=1e-5)


def test_flat_24x7_load_commits_to_reserved():
    r = rec.commitment("p4d.24xlarge in us-east-1", [1] * WEEK, OD, [RI_1Y, RI_3Y])
    assert r.kind == "commit"
    assert r.detail["level"] == 1
    assert "3y" in r.title  # the deeper discount wins when the instance runs every hour
    # (32.7726 - 11.57) $/h x 730 h = 21.2026 x 730 = 15477.898 $/month; 21.2026/32.7726 = 64.696 %
    assert r.monthly_usd_saved == pytest.approx(15477.898, rel=1e-6)
    assert r.pct_saved == pytest.approx(64.696, abs=1e-3)
    assert r.risk == "high"  # three years of payments whatever happens
    assert r.kwh_per_month == 0.0


def test_office_hours_load_stays_on_demand():
    counts = office_hours_week()
    assert sum(counts) == 40
    r = rec.commitment("p4d.24xlarge in us-east-1", counts, OD, [RI_1Y, RI_3Y])
    # 40/168 = 23.8 % of hours, under the cheapest break-even of 35.3 %
    assert r.kind == "no_commitment"
    assert r.monthly_usd_saved == 0.0
    assert "24%" in r.reasoning and "35%" in r.reasoning


def test_usage_below_break_even_means_no_commitment_and_above_means_commit():
    half = [1, 0] * (WEEK // 2)  # 50 % of hours
    below = rec.commitment("x", half, OD, [RI_1Y])  # 1y breaks even at 58.6 %
    assert below.kind == "no_commitment"
    above = rec.commitment("x", half, OD, [RI_3Y])  # 3y breaks even at 35.3 %
    assert above.kind == "commit"
    # 84 h on-demand = 2752.8984 $; committed 168 x 11.57 = 1943.76 $; saved 809.1384 $ per
    # 168 h -> x 730/168 = 3515.956 $/month
    assert above.monthly_usd_saved == pytest.approx(809.1384 * 730 / 168, rel=1e-9)


def test_commitment_level_follows_the_hourly_distribution():
    # Ten hours: 2 instances always, a 3rd in 4 of them (40 %), a 4th in 1 (10 %).
    counts = [4, 3, 3, 3, 2, 2, 2, 2, 2, 2]
    assert rec.commitment_level(counts, 0.586465) == 2
    assert rec.commitment_level(counts, 0.353039) == 3
    r = rec.commitment("x", counts, OD, [RI_1Y, RI_3Y])
    # now: 25 instance-hours x 32.7726 = 819.315; 3y at level 3: 30 x 11.57 + 1 x 32.7726
    # = 379.8726 -> saves 439.4424 per 10 h; 1y at level 2 saves only 271.052.
    assert r.detail["level"] == 3
    assert r.monthly_usd_saved == pytest.approx(439.4424 * 73, rel=1e-9)
    assert {a["option"]: a["level"] for a in r.detail["alternatives"]} == {
        "Reserved instance 1y": 2, "Reserved instance 3y": 3}


def test_no_commitment_prices_says_so():
    r = rec.commitment("x", [1] * WEEK, OD, [])
    assert r.kind == "no_commitment"
    assert "No commitment prices" in r.reasoning


TRAINER = rec.WorkloadTraits("trainer", "training", True, 30, False)


def test_checkpointed_training_goes_to_spot_net_of_interruptions():
    r = rec.spot_fit(TRAINER, 1.006, 0.40, "5-10%", 730.0, 100.0, 400.0)
    assert r.kind == "spot"
    # 0.10 interruptions/month / 730 h x (15 min lost + 10 min restart)/60 = 5.70776e-5
    assert r.detail["overhead_share"] == pytest.approx(0.10 / 730 * 25 / 60, rel=1e-12)
    # (1.006 - 0.40 x 1.0000570776) x 730 = 0.60597717 x 730 = 442.3633 $/month
    assert r.monthly_usd_saved == pytest.approx(442.3633, rel=1e-6)
    assert r.pct_saved == pytest.approx(60.2363, abs=1e-3)
    # the redone work costs energy: 5.70776e-5 x 100 kWh, at 400 g/kWh
    assert r.kwh_per_month == pytest.approx(0.00570776, rel=1e-5)
    assert r.co2e_kg_per_month == pytest.approx(0.00570776 * 0.4, rel=1e-5)
    assert r.risk == "low"


def test_unknown_interruption_band_assumes_the_worst_and_says_so():
    r = rec.spot_fit(TRAINER, 1.006, 0.40, "", 730.0, 100.0, None)
    assert r.detail["band"] == ">20%" and r.detail["band_assumed"]
    assert r.detail["overhead_share"] == pytest.approx(0.30 / 730 * 25 / 60)
    assert "assumed" in r.reasoning
    assert r.co2e_kg_per_month is None  # no intensity: unknown, not zero
    assert r.risk == "high"


def test_latency_critical_serving_stays_on_demand():
    serving = rec.WorkloadTraits("chat-api", "inference", False, None, True)
    r = rec.spot_fit(serving, 1.006, 0.40, "<5%", 730.0, 100.0, 400.0)
    assert r.kind == "stay_on_demand"
    assert r.monthly_usd_saved == 0.0
    assert "latency-critical" in r.reasoning


def test_training_without_checkpoints_is_not_moved_to_spot():
    r = rec.spot_fit(rec.WorkloadTraits("t", "training", True, None, False), 1.006, 0.4,
                     "<5%", 730.0, 1.0, None)
    assert r.kind == "stay_on_demand" and "checkpoint" in r.reasoning


def test_not_interruptible_gets_no_spot_advice():
    assert rec.spot_fit(rec.WorkloadTraits("t", "training", False, 30, False), 1.0, 0.4,
                        "<5%", 730.0, 1.0, None) is None


def test_missing_spot_price_claims_no_saving():
    r = rec.spot_fit(TRAINER, 1.006, None, "", 730.0, 100.0, None)
    assert r.monthly_usd_saved == 0.0 and r.detail == {"missing": "spot_price"}


def test_spot_dearer_than_on_demand_is_not_recommended():
    r = rec.spot_fit(TRAINER, 10.0, 12.0, "<5%", 730.0, 100.0, 400.0)
    assert r.kind == "stay_on_demand" and "does not pay" in r.title
    assert r.monthly_usd_saved == 0.0 and r.pct_saved == 0.0
    # (10 - 12 x (1 + 0.05/730 x 25/60)) x 730 = (10 - 12.000342) x 730 = -1460.25 $/month
    assert r.detail["net_monthly_usd"] == pytest.approx(-1460.25, abs=0.01)
    assert r.kwh_per_month == 0.0
    assert "$12.0000/h" in r.reasoning and "$10.0000/h" in r.reasoning


def test_spot_cheaper_on_the_list_but_not_net_of_redone_work_does_not_pay():
    # 0.99999 $/h spot, worst band, 30 min checkpoints: overhead 0.30/730 x 25/60 = 1.7123e-4
    # -> 0.99999 x 1.00017123 = 1.000161 $/h, above 1.0 $/h on-demand
    r = rec.spot_fit(TRAINER, 1.0, 0.99999, "", 730.0, 100.0, None)
    assert r.kind == "stay_on_demand" and r.monthly_usd_saved == 0.0
    assert r.detail["effective_usd_per_hour"] == pytest.approx(0.99999 * (1 + 0.3 / 730 * 25 / 60))


def test_idle_on_demand_host_is_stopped():
    # a g5.xlarge idle for 48 h drawing 25 W; PUE 1.2, 400 g/kWh; it ran every hour (730 h/mo)
    r = rec.stop_idle("gpu-1", "on_demand", 1.006, 1, 48, 0.025, 1.2, 400.0, 730.0)
    assert r.kind == "stop_idle"
    assert r.monthly_usd_saved == pytest.approx(734.38)  # 1.006 x 730
    assert r.kwh_per_month == pytest.approx(-21.9)  # 0.025 kW x 730 h x 1.2
    assert r.co2e_kg_per_month == pytest.approx(-8.76)


def test_stopping_saves_only_the_hours_the_host_runs():
    # ran 72 of 168 h: 72 x 730/168 = 312.857 h a month, not 730
    hours = 72 * 730 / 168
    r = rec.stop_idle("gpu-1", "on_demand", 1.006, 1, 48, 0.025, 1.0, None, hours)
    assert r.monthly_usd_saved == pytest.approx(1.006 * 312.857, rel=1e-5)
    assert r.kwh_per_month == pytest.approx(-0.025 * 312.857, rel=1e-5)


def test_idle_reserved_host_saves_energy_not_dollars():
    r = rec.stop_idle("gpu-1", "reserved", 19.22, 8, 48, 0.4, 1.1, None, 730.0)
    assert r.kind == "stop_idle" and r.monthly_usd_saved == 0.0
    assert r.kwh_per_month == pytest.approx(-0.4 * 730 * 1.1)
    assert "commitment" in r.reasoning


def load(name, idle, *, gpus=8, kw=0.3, usd=OD, hours=730.0):
    return rec.HostLoad(name, gpus, idle, kw, usd, hours)


def test_one_partly_idle_host_claims_energy_not_a_share_of_its_price():
    # 7 of 8 GPUs idle but no smaller instance to move to: the bill stays whole
    r = rec.consolidate("gpu-1", "on_demand", [load("gpu-1", 7, kw=0.4)], 1.1, 400.0)
    assert r.kind == "consolidate" and "onto fewer hosts" in r.title
    assert r.monthly_usd_saved == 0.0 and r.pct_saved == 0.0
    assert r.kwh_per_month == pytest.approx(-0.4 * 730 * 1.1)  # -321.2 kWh
    assert r.co2e_kg_per_month == pytest.approx(-128.48)
    assert r.detail["freed"] == []


def test_consolidation_frees_a_whole_host_when_the_busy_gpus_fit_on_fewer():
    # 3 p4d hosts with 8 GPUs: 4 + 3 + 6 = 13 busy GPUs fit on 2 hosts; one is freed. Hosts
    # that run fewer hours are the ones freed (the smaller, surer saving): c, 365 h/month.
    hosts = [load("a", 4, kw=0.2, hours=730.0), load("b", 5, kw=0.25, hours=500.0),
             load("c", 2, kw=0.1, hours=365.0)]
    r = rec.consolidate("p4d.24xlarge in us-east-1", "on_demand", hosts, 1.0, None)
    assert r.detail["freed"] == ["c"]
    # 32.7726 $/h x 365 h = 11962.00 $/month of a total 32.7726 x 1595 = 52272.30
    assert r.monthly_usd_saved == pytest.approx(32.7726 * 365)
    assert r.pct_saved == pytest.approx(365 / 1595 * 100)
    # 11 idle GPUs draw 0.55 kW, 0.05 kW each; 8 of them go: 0.4 kW x 365 h
    assert r.kwh_per_month == pytest.approx(-0.4 * 365)
    assert r.co2e_kg_per_month is None


def test_consolidating_committed_hosts_saves_no_dollars():
    hosts = [load("a", 6, usd=19.22), load("b", 6, usd=19.22)]
    r = rec.consolidate("x", "reserved", hosts, 1.0, None)
    assert r.detail["freed"] == ["b"] and r.monthly_usd_saved == 0.0
    assert "commitment" in r.reasoning


def test_busy_hosts_get_no_consolidation_advice():
    assert rec.consolidate("gpu-1", "on_demand", [load("gpu-1", 0)], 1.0, None) is None


G5 = {name: rec.InstanceOffer(name, "NVIDIA A10G", n, 24, usd) for name, n, usd in
      [("g5.xlarge", 1, 1.006), ("g5.2xlarge", 1, 1.212), ("g5.12xlarge", 4, 5.672)]}
T4 = rec.InstanceOffer("g4dn.xlarge", "NVIDIA T4", 1, 16, 0.526)


def test_rightsize_to_fewer_gpus_of_the_same_family():
    r = rec.rightsize("gpu-1", G5["g5.12xlarge"], 1, 10.0, [*G5.values(), T4], 730.0, 0.075,
                      1.0, None)
    assert r.detail["to"] == "g5.xlarge"  # not the cheaper T4: different, slower GPU
    assert r.monthly_usd_saved == pytest.approx((5.672 - 1.006) * 730)
    assert r.pct_saved == pytest.approx(4.666 / 5.672 * 100)
    assert r.kwh_per_month == pytest.approx(-0.075 * 730)


def test_rightsize_respects_memory_and_gpu_count():
    # 22 GiB peak + 20 % headroom = 26.4 GiB: no A10G (24 GiB) holds it
    assert rec.rightsize("h", G5["g5.12xlarge"], 1, 22.0, list(G5.values()), 730, 0, 1, None) \
        is None
    # all 4 GPUs used: nothing smaller has 4
    assert rec.rightsize("h", G5["g5.12xlarge"], 4, 10.0, list(G5.values()), 730, 0, 1, None) \
        is None
    # memory not measured: no advice rather than a guess
    assert rec.rightsize("h", G5["g5.12xlarge"], 1, None, list(G5.values()), 730, 0, 1, None) \
        is None
    a100_80 = rec.InstanceOffer("p4de.24xlarge", "NVIDIA A100 80GB", 8, 80, 40.9657)
    a100_40 = rec.InstanceOffer("p4d.24xlarge", "NVIDIA A100 40GB", 8, 40, 32.7726)
    r = rec.rightsize("h", a100_80, 8, 30.0, [a100_40], 730, 0, 1, None)
    assert r.detail["to"] == "p4d.24xlarge" and r.kwh_per_month == 0.0


def test_commitment_curve_figure_plots_share_and_break_even_lines():
    from greenops.costs.cost_charts import commitment_curve

    counts = [4, 3, 3, 3, 2, 2, 2, 2, 2, 2]
    r = rec.commitment("x", counts, OD, [RI_1Y, RI_3Y])
    assert r.detail["share_at_least"] == [1.0, 1.0, 0.4, 0.1]
    from dataclasses import asdict

    fig = commitment_curve(asdict(r))
    bars, *lines = fig["data"]
    assert bars["y"] == [100.0, 100.0, 40.0, 10.0]
    assert [ln["y"][0] for ln in lines] == [58.65, 35.3]  # 19.22/32.7726, 11.57/32.7726


# Killed mutants of `make mutate MODULES=recommend` (issue 16, tests/mutation/SURVIVORS.md).


def test_stop_idle_in_full():
    # stop_idle_9..59: every field, and the commitment sentence. An on-demand host of 8 GPUs
    # drawing 0.56 kW idle, $12/h, running 300 h a month, PUE 1.5, 400 g/kWh:
    # -0.56 kW x 300 h x 1.5 = -252 kWh; x 400 g/kWh = -100.8 kg; $12 x 300 h = $3,600.
    reasoning = ("All 8 GPUs of gpu-7 stayed under the idle threshold for the last 24 hours "
                 "while drawing 560 W; it runs about 300 h a month.")
    for option in ("on_demand", "spot"):
        r = rec.stop_idle("gpu-7", option, 12.0, 8, 24, 0.56, 1.5, 400.0, 300.0)
        assert (r.kind, r.subject, r.title, r.risk, r.reasoning) == (
            "stop_idle", "gpu-7", "Stop gpu-7: its GPUs have been idle for 24 hours", "low",
            reasoning)
        assert (r.monthly_usd_saved, r.pct_saved) == (3600.0, 100.0)
        assert r.kwh_per_month == pytest.approx(-252.0)
        assert r.co2e_kg_per_month == pytest.approx(-100.8)
    # A commitment is paid whether the host runs or not: energy and CO2e, no dollars.
    r = rec.stop_idle("gpu-7", "reserved_1y", 12.0, 8, 24, 0.56, 1.5, 400.0, 300.0)
    assert (r.monthly_usd_saved, r.pct_saved) == (0.0, 0.0)
    assert r.kwh_per_month == pytest.approx(-252.0)
    assert r.reasoning == reasoning + (" It is on a commitment, so stopping saves energy and CO2e "
                                       "but not dollars; move other work onto it instead.")
    # No known price: nothing claimed in dollars (not $1/h x 300 h).
    r = rec.stop_idle("gpu-7", "on_demand", None, 8, 24, 0.56, 1.5, None, 300.0)
    assert (r.monthly_usd_saved, r.pct_saved, r.co2e_kg_per_month) == (0.0, 0.0, None)


L4_X4 = rec.InstanceOffer("g6.12xlarge", "NVIDIA L4", 4, 24.0, 4.6016)
L4_X1 = rec.InstanceOffer("g6.xlarge", "NVIDIA L4", 1, 24.0, 0.8048)


def test_rightsize_edges():
    # rightsize_16: a peak of 20 GiB needs 20 x 1.2 = 24 GiB, which an L4's 24 GiB holds.
    r = rec.rightsize("h", L4_X4, 1, 20.0, [L4_X1], 730.0, 0.03, 1.2, 400.0)
    assert r.detail == {"to": "g6.xlarge"}
    # (4.6016 - 0.8048) $/h x 730 h = $2,771.66; 3 GPUs fewer: -0.03 kW x 730 h x 1.2 kWh.
    assert r.monthly_usd_saved == pytest.approx(2771.664)
    assert r.kwh_per_month == pytest.approx(-26.28)
    # rightsize_17: an instance at the same price saves nothing: no recommendation.
    same = rec.InstanceOffer("g6.12xlarge-b", "NVIDIA L4", 4, 24.0, 4.6016)
    assert rec.rightsize("h", L4_X4, 1, 20.0, [same], 730.0, 0.03, 1.2, 400.0) is None
    # rightsize_34, 35: as many GPUs on the new instance (A100 80GB -> 40GB, 8 each, a 30 GiB
    # peak needs 36 GiB): no GPU removed, so no energy change.
    p4de = rec.InstanceOffer("p4de.24xlarge", "NVIDIA A100 80GB", 8, 80.0, 40.9657)
    p4d = rec.InstanceOffer("p4d.24xlarge", "NVIDIA A100 40GB", 8, 40.0, OD)
    r = rec.rightsize("h", p4de, 8, 30.0, [p4d], 730.0, 0.5, 1.2, 400.0)
    assert r.detail == {"to": "p4d.24xlarge"}
    assert (r.kwh_per_month, r.co2e_kg_per_month) == (0.0, 0.0)


TRAINS = rec.WorkloadTraits("trainer", "training", True, 30, False)


def test_spot_fit_in_full():
    # spot_fit's surviving mutants: texts, risk, detail and the sums, on each branch.
    # Band 5-10% = 0.10 interruptions a month / 730 h, each losing half a 30-minute interval +
    # 10 min restart = 25 min: 0.10 / 730 x 25 / 60 = 5.7078e-5 (0.006 %) extra run time.
    # $0.40 x (1 + 5.7078e-5) = $0.400023/h; ($1.006 - that) x 730 h = $442.363 a month of
    # $734.38 on-demand = 60.236 %; energy 100 kWh x 5.7078e-5 = 0.0057 kWh x 0.4 kg/kWh.
    overhead = 0.10 / 730 * 25 / 60
    r = rec.spot_fit(TRAINS, 1.006, 0.40, "5-10%", 730.0, 100.0, 400.0)
    assert (r.kind, r.subject, r.title, r.risk) == ("spot", "trainer", "Run trainer on spot", "low")
    assert r.monthly_usd_saved == pytest.approx(442.36333333)
    assert r.pct_saved == pytest.approx(60.2362991)
    assert r.kwh_per_month == pytest.approx(100 * overhead)
    assert r.co2e_kg_per_month == pytest.approx(100 * overhead * 0.4)
    assert r.reasoning == (
        "trainer can be interrupted. Spot at $0.4000/h against $1.0060/h on-demand; with "
        "interruption band 5-10% each interruption loses half a 30-minute checkpoint interval "
        "plus 10 minutes to restart, 0.006% extra run time, which also costs that much more "
        "energy.")
    assert r.detail == {"overhead_share": pytest.approx(overhead),
                        "effective_usd_per_hour": pytest.approx(0.4 * (1 + overhead)),
                        "band": "5-10%", "band_assumed": False,
                        "net_monthly_usd": pytest.approx(442.36333333)}
    # No band known: the worst (>20%, 0.30 a month) is assumed and said; risk high. A batch job
    # without checkpoints loses the items in flight plus the restart: 0.30 / 730 x 10 / 60.
    batch = rec.WorkloadTraits("nightly", "batch", True, None, False)
    r = rec.spot_fit(batch, 1.006, 0.40, "", 730.0, 100.0, None)
    assert (r.kind, r.risk, r.co2e_kg_per_month) == ("spot", "high", None)
    assert r.detail["band"] == ">20%" and r.detail["band_assumed"] is True
    assert r.detail["overhead_share"] == pytest.approx(0.30 / 730 * 10 / 60)
    assert r.reasoning == (
        "nightly can be interrupted. Spot at $0.4000/h against $1.0060/h on-demand; with "
        "interruption band >20%" + rec.ASSUMED_BAND + " each interruption loses the batch items "
        "in flight plus 10 minutes to restart, 0.007% extra run time, which also costs that "
        "much more energy.")
    # Spot dearer than on-demand: $12 x (1 + 0.05 / 730 x 25 / 60) = $12.000342/h against $10:
    # ($10 - $12.000342) x 730 h = -$1,460.25 a month.
    r = rec.spot_fit(TRAINS, 10.0, 12.0, "<5%", 730.0, 100.0, 400.0)
    assert (r.kind, r.title, r.monthly_usd_saved, r.pct_saved, r.risk, r.kwh_per_month,
            r.co2e_kg_per_month) == ("stay_on_demand", "Spot does not pay for trainer", 0.0, 0.0,
                                     "low", 0.0, 0.0)
    assert r.reasoning == (
        "trainer could run on spot, but spot at $12.0000/h plus 0.003% redone work (interruption "
        "band <5%) comes to $12.0003/h against $10.0000/h on-demand: it would cost $1460.25 more "
        "a month. Stay on on-demand.")
    assert r.detail["net_monthly_usd"] == pytest.approx(-1460.25)
    r = rec.spot_fit(TRAINS, 10.0, 12.0, "", 730.0, 100.0, 400.0)
    assert "(interruption band >20%, assumed) comes to" in r.reasoning


def test_spot_fit_refusals_in_full():
    serving = rec.WorkloadTraits("api", "inference", True, None, True)
    r = rec.spot_fit(serving, 1.006, 0.40, "<5%", 730.0, 100.0, 400.0)
    assert (r.kind, r.subject, r.title, r.monthly_usd_saved, r.pct_saved, r.risk,
            r.kwh_per_month, r.co2e_kg_per_month) == (
        "stay_on_demand", "api", "Keep api on on-demand (or committed) capacity", 0.0, 0.0,
        "low", 0.0, 0.0)
    assert r.reasoning == (
        "api serves latency-critical requests: a spot interruption gives only two minutes' "
        "notice and would drop requests. Its savings belong in a commitment, not in spot.")
    r = rec.spot_fit(rec.WorkloadTraits("t", "training", True, None, False), 1.006, 0.4, "<5%",
                     730.0, 100.0, 400.0)
    assert (r.kind, r.subject, r.title, r.monthly_usd_saved, r.pct_saved, r.risk,
            r.kwh_per_month, r.co2e_kg_per_month) == (
        "stay_on_demand", "t", "Add checkpoints before moving t to spot", 0.0, 0.0, "low", 0.0,
        0.0)
    assert r.reasoning == (
        "t is marked interruptible but has no checkpoint interval: an interruption would lose "
        "the whole run. Checkpoint it, then it can move to spot.")
    r = rec.spot_fit(TRAINS, 1.006, None, "", 730.0, 100.0, None)
    assert (r.kind, r.subject, r.title, r.monthly_usd_saved, r.pct_saved, r.risk,
            r.kwh_per_month, r.co2e_kg_per_month, r.detail) == (
        "spot", "trainer", "trainer fits spot, but there is no spot price to size it", 0.0,
        0.0, "medium", 0.0, 0.0, {"missing": "spot_price"})
    assert r.reasoning == (
        "No spot price is in the catalog for this instance type and region (spot prices come "
        "only from a refresh with AWS credentials), so no saving is claimed.")


def test_consolidate_in_full():
    # consolidate's surviving mutants: the ranking, the sums, texts and detail. Three on-demand
    # hosts: gpu-1 8 GPUs (6 idle, 0.36 kW) $30/h x 730 h = $21,900; gpu-2 8 GPUs (7 idle,
    # 0.42 kW) $30/h x 365 h = $10,950; gpu-3 4 GPUs (all idle, 0.24 kW) $15/h x 730 h = $10,950.
    # Busy: 2 + 1 + 0 = 3 GPUs, which fit on the first host kept: the largest, and of the two
    # 8-GPU hosts the dearer to run, gpu-1. Freed: gpu-2 and gpu-3, $21,900 of $43,800 = 50 %.
    # Idle draw per GPU: 1.02 kW / 17 = 0.06 kW; switched off: (8 x 365 + 4 x 730) GPU-hours x
    # 0.06 kW x PUE 1.2 = 420.48 kWh, x 0.4 kg/kWh = 168.192 kg.
    hosts = [rec.HostLoad("gpu-3", 4, 4, 0.24, 15.0, 730.0),
             rec.HostLoad("gpu-2", 8, 7, 0.42, 30.0, 365.0),
             rec.HostLoad("gpu-1", 8, 6, 0.36, 30.0, 730.0)]
    r = rec.consolidate("p4d in us-east-1", "on_demand", hosts, 1.2, 400.0)
    assert (r.kind, r.subject, r.risk) == ("consolidate", "p4d in us-east-1", "medium")
    assert r.title == "Consolidate workloads onto fewer hosts: free 2 of 3 (p4d in us-east-1)"
    assert r.monthly_usd_saved == pytest.approx(21900.0)
    assert r.pct_saved == pytest.approx(50.0)
    assert r.kwh_per_month == pytest.approx(-420.48)
    assert r.co2e_kg_per_month == pytest.approx(-168.192)
    why = ("3 GPUs are busy across gpu-3, gpu-2, gpu-1 (17 idle for days); they fit on 1 "
           "host, so gpu-2, gpu-3 can be stopped once its work moves.")
    assert r.reasoning == why
    assert r.detail == {"hosts": ["gpu-3", "gpu-2", "gpu-1"], "freed": ["gpu-2", "gpu-3"],
                        "busy_gpus": 3, "idle_gpus": 17}
    # On a commitment: the same hosts freed, energy saved, no dollars.
    r = rec.consolidate("p4d in us-east-1", "reserved", hosts, 1.2, None)
    assert (r.monthly_usd_saved, r.pct_saved, r.co2e_kg_per_month) == (0.0, 0.0, None)
    assert r.kwh_per_month == pytest.approx(-420.48)
    assert r.reasoning == why + (" These hosts are on a commitment, so stopping one saves energy "
                                 "and CO2e but not dollars until the commitment ends.")
    # Spot bills by the hour too.
    assert rec.consolidate("x", "spot", hosts, 1.2, None).monthly_usd_saved == \
        pytest.approx(21900.0)
    # Nothing can be freed (7 of 8 GPUs busy): the idle GPU's draw, 0.06 kW x 730 h x PUE 1.1 =
    # 48.18 kWh, and no dollars.
    r = rec.consolidate("gpu-1", "on_demand", [rec.HostLoad("gpu-1", 8, 1, 0.06, 30.0, 730.0)],
                        1.1, 400.0)
    assert (r.title, r.monthly_usd_saved, r.pct_saved) == (
        "Consolidate workloads onto fewer hosts (gpu-1)", 0.0, 0.0)
    assert r.kwh_per_month == pytest.approx(-48.18)
    assert r.co2e_kg_per_month == pytest.approx(-19.272)
    assert r.reasoning == (
        "1 GPU on gpu-1 stayed idle for days, but the busy GPUs need every host and no "
        "smaller instance of this GPU family in the catalog fits the work, so no dollars are "
        "claimed: the instance is billed whole. The energy figure is the idle GPUs' measured "
        "draw, put to use by moving work from other hosts onto them.")
    assert r.detail == {"hosts": ["gpu-1"], "freed": [], "busy_gpus": 7, "idle_gpus": 1}


def test_commitment_in_full():
    # commitment's surviving mutants. 8 hours: 2, 2, 1, 1, 1, 0, 0, 0 instances at $10/h on-demand
    # = 7 instance-hours = $70; a month is 730 / 8 = 91.25 times this.
    # 1y at $6 breaks even at 0.6: 1 instance ran in 5/8 = 0.625 of the hours (2 in 0.25): level
    #   1, cost 8 x $6 + 2 extra hours x $10 = $68, saves $2 ($182.50 a month).
    # 3y at $4 breaks even at 0.4: level 1, 8 x $4 + $20 = $52, saves $18 ($1,642.50 a month,
    #   18 / 70 = 25.71 %). The 3y wins; its risk is high.
    counts = [2, 2, 1, 1, 1, 0, 0, 0]
    one, three = rec.CommitOption("RI 1y", 6.0, 1), rec.CommitOption("RI 3y", 4.0, 3)
    r = rec.commitment("g6", counts, 10.0, [one, three])
    assert (r.kind, r.subject, r.title, r.risk, r.kwh_per_month, r.co2e_kg_per_month) == (
        "commit", "g6", "Commit to 1 x g6 (RI 3y)", "high", 0.0, 0.0)
    assert r.monthly_usd_saved == pytest.approx(1642.5)
    assert r.pct_saved == pytest.approx(18 / 70 * 100)
    assert r.reasoning == (
        "1 instance(s) ran in 62% of the hours; RI 3y at $4.0000/h breaks even at 40% use "
        "against $10.0000/h on-demand. The same hardware runs either way, so energy and CO2e do "
        "not change. Risk: you pay for 3 year(s) even if the work stops.")
    alternatives = [
        {"option": "RI 1y", "break_even_utilisation": 0.6, "level": 1,
         "monthly_usd_saved": pytest.approx(182.5)},
        {"option": "RI 3y", "break_even_utilisation": 0.4, "level": 1,
         "monthly_usd_saved": pytest.approx(1642.5)}]
    assert r.detail == {"alternatives": alternatives, "level": 1, "break_even_utilisation": 0.4,
                        "share_at_least": [0.625, 0.25]}
    # The 1y alone: risk medium, "1 year(s)".
    r = rec.commitment("g6", counts, 10.0, [one])
    assert r.risk == "medium"
    assert r.reasoning.endswith("you pay for 1 year(s) even if the work stops.")
    # Two options that save the same: the first listed (no comparison of the options).
    same = rec.CommitOption("SP 1y", 4.0, 1)
    assert rec.commitment("g6", counts, 10.0, [same, three]).title == "Commit to 1 x g6 (SP 1y)"
    # Saving 4 x $0.125 = $0.50 in 4 hours is still a saving ...
    assert rec.commitment("g6", [1] * 4, 10.0, [rec.CommitOption("c", 9.875, 1)]).kind == "commit"
    # ... saving exactly nothing is not (level 1 at the on-demand price: $40 either way).
    r = rec.commitment("g6", [1, 1, 1, 1], 10.0, [rec.CommitOption("c", 10.0, 1)])
    assert (r.kind, r.subject, r.title, r.monthly_usd_saved, r.pct_saved, r.risk,
            r.kwh_per_month, r.co2e_kg_per_month) == (
        "no_commitment", "g6", "No commitment for g6", 0.0, 0.0, "low", 0.0, 0.0)
    assert r.reasoning == (
        "At least one instance ran in 100% of the hours; the cheapest commitment breaks even at "
        "100%. Commitments would cost more than on-demand for this usage; stay on-demand, or on "
        "spot where the work can be interrupted.")
    assert r.detail == {"alternatives": [{"option": "c", "break_even_utilisation": 1.0,
                                          "level": 1, "monthly_usd_saved": 0.0}],
                        "busy_share": 1.0, "share_at_least": [1.0]}
    r = rec.commitment("g6", [1, 0], 10.0, [])
    assert r.reasoning.startswith(
        "No commitment prices are in the catalog for this instance type. Commitments would")


def test_commitment_level_edges():
    assert rec.commitment_level([], 0.5) == 0  # no hours, no instance to commit to
    assert rec.commitment_level([0, 0], 0.5) == 0
    assert rec.commitment_level([1, 1, 0, 0], 0.5) == 1  # exactly at break-even counts
    assert rec.commitment_level([1, 2], 0.0) == 2  # a free commitment: up to the peak, no more


def test_rightsize_in_full():
    # g6.12xlarge (4 x L4, $4.6016/h) using 1 GPU, peak 20 GiB -> g6.xlarge (1 x L4, $0.8048/h):
    # (4.6016 - 0.8048) / 4.6016 = 82.51 % saved; 3 GPUs fewer at 0.03 kW x 730 h x PUE 1.2 =
    # 26.28 kWh less, x 0.4 kg/kWh = 10.512 kg.
    r = rec.rightsize("h", L4_X4, 1, 20.0, [L4_X1], 730.0, 0.03, 1.2, 400.0)
    assert (r.kind, r.subject, r.title, r.risk) == (
        "rightsize", "h", "Move h from g6.12xlarge to g6.xlarge", "medium")
    assert r.pct_saved == pytest.approx((4.6016 - 0.8048) / 4.6016 * 100)
    assert r.kwh_per_month == pytest.approx(-26.28)
    assert r.co2e_kg_per_month == pytest.approx(-10.512)
    assert r.reasoning == (
        "h used 1 of 4 NVIDIA L4 GPUs, peaking at 20.0 GiB; g6.xlarge has 1 x NVIDIA L4 with "
        "24 GiB each (20% headroom kept) at $0.8048/h instead of $4.6016/h. Check throughput on "
        "the new GPU before switching: a different GPU model may run slower.")


def test_spot_fit_and_consolidate_edges():
    # spot_fit_134..142: the risk of each interruption band.
    risks = {band: rec.spot_fit(TRAINS, 1.006, 0.40, band, 730.0, 100.0, None).risk
             for band in ("<5%", "5-10%", "10-15%", "15-20%", ">20%")}
    assert risks == {"<5%": "low", "5-10%": "low", "10-15%": "medium", "15-20%": "high",
                     ">20%": "high"}
    # _162: no hours, no saving: not advice to move. _165: the subject of that advice.
    r = rec.spot_fit(TRAINS, 1.006, 0.40, "<5%", 0.0, 0.0, None)
    assert (r.kind, r.subject) == ("stay_on_demand", "trainer")
    # _163: one hour at $1 - $0.40 x (1 + 0.05 / 730 x 25 / 60) = $0.599989 is a saving.
    r = rec.spot_fit(TRAINS, 1.0, 0.40, "<5%", 1.0, 1.0, None)
    assert r.kind == "spot"
    assert r.monthly_usd_saved == pytest.approx(1.0 - 0.4 * (1 + 0.05 / 730 * 25 / 60))
    # consolidate_19: 8 busy GPUs fit exactly on the first 8-GPU host: the other is freed.
    hosts = [rec.HostLoad("a", 8, 0, 0.0, 30.0, 730.0), rec.HostLoad("b", 8, 8, 0.48, 30.0, 730.0)]
    assert rec.consolidate("x", "on_demand", hosts, 1.0, None).detail["freed"] == ["b"]
    # consolidate_111: hosts that cost nothing to run (no price): 0 % saved, not 0 / 0.
    free = [rec.HostLoad("a", 8, 4, 0.24, 0.0, 730.0), rec.HostLoad("b", 8, 8, 0.48, 0.0, 730.0)]
    r = rec.consolidate("x", "on_demand", free, 1.0, None)
    assert (r.detail["freed"], r.monthly_usd_saved, r.pct_saved) == (["b"], 0.0, 0.0)
