"""A person logs in, opens the team dashboard and sees the charts drawn with data."""

from __future__ import annotations

import pytest

from tests.browser import log_in, page  # noqa: F401  (fixture)
from tests.conftest import make_batch

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
