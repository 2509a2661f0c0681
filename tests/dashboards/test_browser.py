"""A person logs in, opens the team dashboard and sees the charts drawn with data."""

from __future__ import annotations

import time
from unittest import mock

import pytest

from greenops.telemetry import fleet, fleetroll
from greenops.telemetry.models import FleetBucket
from tests.support.browser import log_in
from tests.support.factories import make_batch, make_host

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]


def test_login_and_dashboard_charts_render(live_server, page, users, team, host,  # noqa: F811
                                           post_batch):
    _, token = host
    assert post_batch(token, make_batch(n_per_gpu=120, step=1.0)).status_code == 202
    log_in(page, live_server.url, "member", "pw-member")
    page.get_by_role("link", name="Vision").first.click()
    page.wait_for_url(f"{live_server.url}/teams/vision/")
    page.get_by_role("link", name="Last hour").click()
    for chart in ("chart-utilisation", "chart-power", "chart-energy"):
        el = page.locator(f"#{chart}[data-rendered='true']")
        el.wait_for()
        # Plotly drew one trace per GPU (bars: one per host) with real points.
        assert page.locator(f"#{chart} .trace, #{chart} .barlayer .point").count() >= 1
    assert page.locator("#chart-utilisation .scatterlayer .trace, "
                        "#chart-utilisation canvas").count() >= 1
    energy = page.locator("[data-kpi='gpu_energy_kwh']").inner_text()
    assert energy != "0.000 kWh"
    assert page.locator("[data-kpi='gpus_reporting']").inner_text() == "2 / 2"
    # the host table (the unpriced-hosts box links the same host to its edit page)
    page.locator("#hosts").get_by_role("link", name="gpu-node-1", exact=True).click()
    page.get_by_role("heading", name="GPUs", exact=True).wait_for()
    assert page.locator("#gpus tbody tr").count() == 2


def test_outsider_cannot_open_the_dashboard(live_server, page, users, team):  # noqa: F811
    log_in(page, live_server.url, "outsider", "pw-outsider")
    response = page.goto(f"{live_server.url}/teams/vision/")
    assert response.status == 404


def test_a_large_fleet_draws_its_charts_from_the_stored_fleet_rollups(
        live_server, page, users, team, post_batch):  # noqa: F811
    """Above 16 GPUs the team page draws the fleet's mean with its p10-p90 band, the closed
    buckets read from the fleet rollups the beat task stores (greenops.telemetry.fleetroll)."""

    start = float(int(time.time()) // 60 * 60 - 600)  # ten whole minutes ago
    for n in range(3):  # 3 hosts x 8 GPUs = 24 GPUs
        _, token = make_host(team, f"fleet-{n}", gpus=8)
        doc = make_batch(n_per_gpu=100, gpus=tuple(range(8)), start=start, step=5.0)
        assert post_batch(token, doc).status_code == 202
    fleetroll.fill()
    assert FleetBucket.objects.filter(team=team, step_s=60).count() >= 5
    log_in(page, live_server.url, "member", "pw-member")
    read = mock.patch.object(fleet.BucketFigures, "from_rows", side_effect=None,
                             wraps=fleet.BucketFigures.from_rows)
    with read as from_rows:  # the live server runs in this process
        page.goto(f"{live_server.url}/teams/vision/?range=hour")
        page.locator("#chart-utilisation[data-rendered='true']").wait_for()
        page.locator("#chart-energy[data-rendered='true']").wait_for()
    assert from_rows.call_count == 1  # the stored buckets, not a live recomputation
    assert page.locator("#chart-utilisation").get_by_text("p10–p90 of GPUs").count() >= 1
    assert page.locator("[data-kpi='gpus_reporting']").inner_text() == "24 / 24"
    assert page.locator("#hosts tbody tr").count() == 3
