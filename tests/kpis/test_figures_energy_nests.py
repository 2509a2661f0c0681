"""Energy nests (issue 29, item 2): GPU <= IT <= facility (IT x PUE) for every window, team,
host and workload, over random fleets, windows, gaps and late data (hypothesis).

Each example builds a fleet in the database: 1-2 hosts of 1-2 GPUs at sites with a PUE in
[1.0, 2.5], GPU hours with gaps (a GPU that did not report in an hour has no row), CPU/RAM
hours that may exist where no GPU reported (and the reverse), a window that may cut hours, and
"late data": hours that arrive after a first rollup and are rolled up again, as rollup.run does
for an agent replaying its spool. It then checks the KPI engine's measure (per host, per
workload, the team) and the team's KPI rollups over the window.
"""

from __future__ import annotations

import datetime as dt

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from greenops.windows import HOUR
from tests.support.factories import make_host

T0 = dt.datetime(2026, 11, 10, tzinfo=dt.UTC)
HOURS = 5
REL = 1e-9  # float sums in a different order


def _nests(gpu_j: float, it_j: float, facility_j: float, what: str) -> None:
    slack = REL * max(1.0, abs(facility_j))
    assert gpu_j >= -slack, what
    assert gpu_j <= it_j + slack, f"{what}: GPU {gpu_j} > IT {it_j}"
    assert it_j <= facility_j + slack, f"{what}: IT {it_j} > facility {facility_j}"


gpu_hour = st.one_of(st.none(), st.floats(0.0, 5e6))  # None: the GPU did not report (a gap)
host_hour = st.one_of(st.none(), st.floats(0.0, 2e6))
host_spec = st.fixed_dictionaries({
    "gpus": st.lists(st.lists(gpu_hour, min_size=HOURS, max_size=HOURS), min_size=1,
                     max_size=2),
    "cpu_ram": st.lists(host_hour, min_size=HOURS, max_size=HOURS),
    "pue": st.floats(1.0, 2.5),
})
fleet_spec = st.fixed_dictionaries({
    "hosts": st.lists(host_spec, min_size=1, max_size=2),
    # The window in minutes from T0: may cut the first and last hours.
    "start_min": st.integers(0, HOURS * 60 - 1),
    "span_min": st.integers(1, HOURS * 60),
    "late_hour": st.integers(0, HOURS - 1),
    "late_j": st.floats(0.0, 5e6),
    "workload_picks": st.lists(st.booleans(), min_size=4, max_size=4),
})


@pytest.mark.django_db
@settings(max_examples=10, deadline=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow])
@given(spec=fleet_spec)
def test_gpu_it_facility_nest_everywhere(team, spec):
    from greenops.carbon.models import HostSite, Site
    from greenops.kpis import queries, rollup
    from greenops.kpis.measure import measure_gpus
    from greenops.telemetry.models import Gpu, GpuHour, GpuMinute, Host, HostEnergyHour
    from greenops.workloads.models import Workload

    made_hosts, made_sites = [], []
    try:
        gpus: list[Gpu] = []
        for n, h in enumerate(spec["hosts"]):
            host, _ = make_host(team, f"prop-{n}", gpus=len(h["gpus"]))
            made_hosts.append(host)
            site = Site.objects.create(team=team, name=f"prop-site-{n}", pue=h["pue"],
                                       grid_intensity_override_g_per_kwh=300.0,
                                       override_source="property test")
            made_sites.append(site)
            HostSite.objects.create(host=host, site=site)
            host_gpus = list(host.gpus.order_by("index"))
            gpus += host_gpus
            hours, minutes = [], []
            for g, series in zip(host_gpus, h["gpus"], strict=True):
                for i, e in enumerate(series):
                    if e is None:
                        continue
                    b = T0 + i * HOUR
                    hours.append(GpuHour(gpu=g, bucket=b, samples=60, util_sum=3000.0,
                                         util_n=60, energy_j=e, util_minutes=60,
                                         idle_minutes=0))
                    minutes += [GpuMinute(gpu=g, bucket=b + dt.timedelta(minutes=m), samples=1,
                                          util_sum=50.0, util_n=1, energy_j=e / 60)
                                for m in range(60)]
            GpuHour.objects.bulk_create(hours)
            GpuMinute.objects.bulk_create(minutes)
            HostEnergyHour.objects.bulk_create([
                HostEnergyHour(host=host, bucket=T0 + i * HOUR, cpu_energy_j=e * 0.7,
                               ram_energy_j=e * 0.3, cpu_method="rapl", ram_method="constant",
                               samples=60)
                for i, e in enumerate(h["cpu_ram"]) if e is not None])
        picked = [g for g, p in zip(gpus, spec["workload_picks"], strict=False) if p]
        wl = Workload.objects.create(team=team, name="prop-wl", kind="inference")
        wl.gpus.add(*picked)
        rollup.rebuild(team, T0, T0 + HOURS * HOUR)
        # Late data: a GPU-hour that arrives after the first rollup, rolled up again.
        late = T0 + spec["late_hour"] * HOUR
        g = gpus[0]
        GpuHour.objects.update_or_create(gpu=g, bucket=late, defaults={
            "samples": 60, "util_sum": 3000.0, "util_n": 60, "energy_j": spec["late_j"],
            "util_minutes": 60, "idle_minutes": 0})
        rollup.rebuild(team, late, late + HOUR)

        start = T0 + dt.timedelta(minutes=spec["start_min"])
        end = min(start + dt.timedelta(minutes=spec["span_min"]), T0 + HOURS * HOUR)
        subjects = [(f"host {h.name}", list(Gpu.objects.filter(host=h).select_related("host")))
                    for h in made_hosts]
        subjects += [("workload", list(wl.gpu_queryset().select_related("host"))),
                     ("team", list(Gpu.objects.filter(host__team=team).select_related("host")))]
        for what, subject in subjects:
            t = measure_gpus(subject, start, end)
            _nests(t.gpu_energy_j, t.gpu_energy_j + t.cpu_ram_energy_j, t.facility_energy_j,
                   f"{what} over [{start}, {end})")
        # The team's KPI rollups over the whole hours inside the window.
        lo, hi = start.replace(minute=0), end.replace(minute=0)
        if hi > lo:
            k = queries.kpis(team, None, lo, hi)
            if k["energy_kwh"] is not None:
                _nests(k["gpu_energy_kwh"], k["energy_kwh"], k["facility_energy_kwh"],
                       f"team KPIs over [{lo}, {hi})")
    finally:
        from greenops.kpis.models import KpiRollup

        KpiRollup.objects.filter(team=team).delete()
        Workload.objects.filter(team=team).delete()
        for h in made_hosts:
            Host.objects.filter(id=h.id).delete()
        for s in made_sites:
            Site.objects.filter(id=s.id).delete()
