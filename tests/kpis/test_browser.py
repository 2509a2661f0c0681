"""A person follows the KPI journey in Chromium: team dashboard -> KPIs -> a workload -> a
training job, then the costs page and the methodology page. Every chart draws with data."""

from __future__ import annotations

import datetime as dt

import pytest
from django.utils import timezone

from greenops import windows
from greenops.kpis import rollup
from greenops.workloads.models import TrainingJob, Workload
from tests.support.browser import log_in
from tests.support.factories import make_host
from tests.support.kpis import add_gpu_hour, add_windows, stand_in_factors

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]


def charts_drawn(page, at_least: int) -> None:  # noqa: F811
    """Every chart on the page was drawn by Plotly, and there are at least `at_least`."""
    page.locator("[data-figure]").first.wait_for()
    n = page.locator("[data-figure]").count()
    assert n >= at_least
    page.locator("[data-figure][data-rendered='true']").nth(n - 1).wait_for()
    assert page.locator("[data-figure] .main-svg").count() >= n


def test_kpi_journey(live_server, page, users, team):  # noqa: F811
    hour = windows.floor_hour(timezone.now()) - dt.timedelta(hours=1)
    host, _ = make_host(team, "A", gpus=1)
    gpu = host.gpus.get()
    add_gpu_hour(gpu, hour, 3_600_000, 40.0, 10, simulated=True)
    w = Workload.objects.create(team=team, name="Ranker", kind="inference")
    w.gpus.add(gpu)
    add_windows(w, hour, requests=(1000,), latencies=[20.0] * 990 + [400.0] * 10)
    rollup.rebuild(team, hour, hour + dt.timedelta(hours=1), stand_in_factors())
    job = TrainingJob.objects.create(team=team, workload=w, name="warm-up run", started_at=hour)
    job.gpus.add(gpu)

    log_in(page, live_server.url, "member", "pw-member")
    page.goto(f"{live_server.url}/teams/{team.slug}/")
    page.get_by_role("link", name="KPIs", exact=True).click()
    page.get_by_role("heading", name="KPIs of Vision").wait_for()
    assert page.locator("[data-kpi='energy_kwh']").first.inner_text() == "1.000 kWh"
    assert "Includes simulated data" in page.content()
    charts_drawn(page, 1)

    page.get_by_role("link", name="Ranker").first.click()
    page.locator("[data-kpi='latency_p99_ms']").wait_for()
    assert page.locator("[data-kpi='latency_p99_ms']").inner_text() == "22.4 ms"
    charts_drawn(page, 3)

    page.goto(f"{live_server.url}/teams/{team.slug}/kpis/")
    page.get_by_role("link", name="warm-up run").click()
    page.get_by_text("running").first.wait_for()

    page.get_by_role("navigation", name="Team sections").get_by_role("link", name="Costs").click()
    page.get_by_role("heading", name="Recommendations").wait_for()

    page.get_by_role("link", name="Methodology").click()
    page.get_by_role("heading", level=1).wait_for()
    assert "intensity" in page.content().lower() and "PUE" in page.content()
