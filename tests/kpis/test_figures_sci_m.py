"""SCI's M per workload (issue 29, item 6), as the Green Software Foundation's SCI
specification defines it: M = TE x (TiR / EL) x (RR / ToR), with the workload's own GPUs.

By hand. Site "green": a server of 8 GPUs with TE = 7,008,000 g CO2e embodied over EL = 4 years
= 35,040 h, so TE / (EL x ToR) = 7,008,000 / (35,040 x 8) = 25 g per GPU-hour. Site "heavy":
200 g per GPU-hour. Workload "small" runs on 1 GPU of the green server for TiR = 10 h:
  M = 7,008,000 x (10 / 35,040) x (1 / 8) = 250 g.
Workload "large" runs on 7 GPUs of the heavy server for 10 h each: M = 200 x 70 = 14,000 g.
The team-average rate the report used before -- (25 x 10 + 200 x 70) / 80 = 178.125 g per
GPU-hour -- gave "small" 1,781.25 g: 7.1 times too high.
"""

from __future__ import annotations

import datetime as dt

import pytest

from greenops.windows import HOUR
from tests.support.factories import make_host

UTC = dt.UTC
T0 = dt.datetime(2026, 10, 5, tzinfo=UTC)


def test_m_uses_the_workloads_own_gpus(team):
    from greenops.carbon.models import HostSite, Site
    from greenops.reports.month_figures import _embodied
    from greenops.telemetry.models import GpuHour
    from greenops.workloads.models import Workload

    te_g, el_h, tor = 7_008_000.0, 35_040.0, 8
    green_rate = te_g / (el_h * tor)
    assert green_rate == 25.0
    green, _ = make_host(team, "green-1", gpus=8)
    heavy, _ = make_host(team, "heavy-1", gpus=8)
    for host, rate in ((green, green_rate), (heavy, 200.0)):
        site = Site.objects.create(team=team, name=f"site {host.name}", pue=1.2,
                                   embodied_co2e_g_per_gpu_hour=rate,
                                   embodied_source="vendor LCA (test)")
        HostSite.objects.create(host=host, site=site)
    small = Workload.objects.create(team=team, name="Small", slug="small", kind="inference")
    small.gpus.add(green.gpus.get(index=0))
    large = Workload.objects.create(team=team, name="Large", slug="large", kind="inference")
    large_gpus = list(heavy.gpus.order_by("index")[:7])
    large.gpus.add(*large_gpus)
    GpuHour.objects.bulk_create([
        GpuHour(gpu=g, bucket=T0 + i * HOUR, samples=60, util_sum=3000.0, util_n=60,
                energy_j=1e6, util_minutes=60, idle_minutes=0)
        for g in [green.gpus.get(index=0), *large_gpus] for i in range(10)])
    end = T0 + dt.timedelta(days=1)
    m_small, how = _embodied(small, T0, end)
    assert m_small == pytest.approx(te_g * (10 / el_h) * (1 / tor)) == pytest.approx(250.0)
    assert "hours it ran" in how
    m_large, _ = _embodied(large, T0, end)
    assert m_large == pytest.approx(14_000.0)
    team_average = (25 * 10 + 200 * 70) / 80
    assert team_average * 10 / m_small == pytest.approx(7.125)  # what the old rule overstated
    # A site without a recorded embodied figure: M unknown, with the reason, never 0.
    bare, _ = make_host(team, "bare-1", gpus=1)
    other = Workload.objects.create(team=team, name="Other", slug="other", kind="inference")
    other.gpus.add(bare.gpus.get())
    assert _embodied(other, T0, end)[0] is None
