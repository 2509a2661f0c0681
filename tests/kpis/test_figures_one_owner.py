"""One owner each (issue 29, item 8): one quantiles module with both rules, hour and day
flooring only in greenops/windows.py, and recommendations that state carbon through the carbon
app's formula (PUE applied once)."""

from __future__ import annotations

import math
import re
from pathlib import Path

import numpy as np
import pytest

from greenops import quantiles

ROOT = Path(__file__).resolve().parents[2]


def test_histogram_quantile_is_prometheus_rule_by_hand():
    # Buckets (0, 100], (100, 200], (200, 400], +Inf with cumulative 0, 800, 1500, 1500:
    # p50 rank 750 in (100, 200]: 100 + 100 x 750 / 800 = 193.75 ms; p99 rank 1485 in
    # (200, 400]: 200 + 200 x 685 / 700 = 395.714 ms; p100 at 1500 stays in (200, 400] -> 400.
    bounds, cum = [100, 200, 400, math.inf], [0, 800, 1500, 1500]
    assert quantiles.histogram_quantile(0.5, bounds, cum) == pytest.approx(193.75)
    assert quantiles.histogram_quantile(0.99, bounds, cum) == pytest.approx(200 + 200 * 685 / 700)
    # A rank in the +Inf bucket is the highest finite bound, as Prometheus answers.
    assert quantiles.histogram_quantile(0.99, [10, math.inf], [50, 100]) == 10
    assert quantiles.histogram_quantile(0.5, [10, math.inf], [0, 0]) is None  # NaN there
    with pytest.raises(ValueError):
        quantiles.histogram_quantile(1.5, bounds, cum)


def test_sorted_quantile_is_numpy_default():
    values = sorted([3.0, 1.0, 4.0, 1.5, 9.0, 2.6])
    for q in (0.0, 0.1, 0.25, 0.5, 0.9, 1.0):
        assert quantiles.sorted_quantile(values, q) == pytest.approx(np.quantile(values, q))
    # By hand: [1, 2, 3, 4] at 0.25 -> position 0.75 -> 1 + 0.75 x (2 - 1) = 1.75.
    assert quantiles.sorted_quantile([1, 2, 3, 4], 0.25) == 1.75


def test_every_quantile_goes_through_the_one_module():
    from greenops.kpis import histogram
    from greenops.telemetry import fleet

    assert fleet.quantile is quantiles.sorted_quantile
    h = {"le_ms": [100, 200, 400], "cumulative": [0, 800, 1500, 1500]}
    assert histogram.quantile_ms(h, 0.5) == quantiles.histogram_quantile(
        0.5, [100, 200, 400, math.inf], [0, 800, 1500, 1500])
    # No second implementation of either rule elsewhere in the server.
    for path in [*(ROOT / "greenops").rglob("*.py"), *(ROOT / "dashboards").rglob("*.py")]:
        rel = path.relative_to(ROOT).as_posix()
        if rel in ("greenops/quantiles.py",) or "/benchmarks/" in rel or "/migrations/" in rel:
            continue
        text = path.read_text()
        assert "bisect_left(counts, rank" not in text, rel
        assert not re.search(r"def \w*quantile\w*\(", text) or rel == \
            "greenops/kpis/histogram.py", rel


FLOORING = re.compile(r"\.replace\(\s*(hour|minute)=0|def floor_(hour|day)\b")


def test_hour_and_day_flooring_only_in_windows():
    found = []
    for path in [*(ROOT / "greenops").rglob("*.py"), *(ROOT / "dashboards").rglob("*.py")]:
        rel = path.relative_to(ROOT).as_posix()
        if rel == "greenops/windows.py" or "/migrations/" in rel:
            continue
        for n, line in enumerate(path.read_text().splitlines(), 1):
            if FLOORING.search(line):
                found.append(f"{rel}:{n}: {line.strip()}")
    assert found == []


def test_recommendations_state_carbon_with_the_carbon_apps_formula():
    from greenops.carbon.accounting import SiteFactors, carbon_for_energy
    from greenops.costs import recommend

    # 0.5 kW of idle GPUs for 100 h a month: -50 kWh IT; x PUE 1.5 = -75 kWh facility;
    # x 400 g/kWh = -30 kg CO2e -- PUE applied once, by carbon_for_energy.
    r = recommend.stop_idle("idle-box", "on_demand", 10.0, 4, 48, 0.5, 1.5, 400.0, 100.0)
    assert r.kwh_per_month == pytest.approx(-75.0)
    assert r.co2e_kg_per_month == pytest.approx(-30.0)
    c = carbon_for_energy(-50 * 3.6e6, SiteFactors(1.5, "", 400.0, ""))
    assert (r.kwh_per_month, r.co2e_kg_per_month) == pytest.approx(
        (c.facility_energy_kwh, c.co2e_g / 1000))
    # No grid intensity known: CO2e unknown, never 0.
    assert recommend.stop_idle("idle-box", "on_demand", 10.0, 4, 48, 0.5, 1.5, None,
                               100.0).co2e_kg_per_month is None
    # Spot's redone work: IT kWh in, facility kWh and CO2e out through the same formula.
    traits = recommend.WorkloadTraits("batch", "training", True, 30.0, False)
    s = recommend.spot_fit(traits, 10.0, 3.0, "<5%", 100.0, 200.0, 400.0, pue=1.5)
    overhead = recommend.spot_overhead("<5%", 30.0)
    assert s.kwh_per_month == pytest.approx(overhead * 200.0 * 1.5)
    assert s.co2e_kg_per_month == pytest.approx(overhead * 200.0 * 1.5 * 0.4)
    source = (ROOT / "greenops/costs/recommend.py").read_text()
    assert "* pue" not in source and "intensity_g_per_kwh / 1000" not in source
