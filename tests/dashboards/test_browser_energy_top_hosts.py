"""The team home's energy chart for a fleet of more hosts than it stacks one by one, in Chromium
at 1440 px and on a 390 px phone: it draws the 8 hosts using the most energy and one
"N other hosts" bar, its title says so, and the page does not scroll sideways."""

from __future__ import annotations

import datetime as dt
import os

import pytest

from tests.support.browser import log_in
from tests.support.factories import make_host

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]


def test_energy_chart_of_twelve_hosts_on_a_desktop_and_a_phone(live_server, page, users,
                                                                team):
    from django.utils import timezone

    from greenops.telemetry.models import GpuHour

    # 12 hosts of 2 GPUs (24: the fleet view), host h using 0.1 x (h + 1) kWh per GPU in each of
    # the last 3 hours: node-04..node-11 drawn, node-00..node-03 the "4 other hosts".
    hour = timezone.now().replace(minute=0, second=0, microsecond=0)
    rows = []
    for h in range(12):
        host, _ = make_host(team, f"node-{h:02d}", gpus=2)
        rows += [GpuHour(gpu=g, bucket=hour - dt.timedelta(hours=b), samples=60,
                         util_sum=60 * 40.0, util_n=60, power_sum_w=60 * 100.0, power_n=60,
                         energy_j=360_000.0 * (h + 1))
                 for g in host.gpus.all() for b in (1, 2, 3)]
    GpuHour.objects.bulk_create(rows)
    log_in(page, live_server.url, "owner", "pw-owner")
    shots = os.environ.get("GREENOPS_SHOTS")
    for width in (1440, 390):
        page.set_viewport_size({"width": width, "height": 900})
        assert page.goto(f"{live_server.url}/teams/{team.slug}/?range=week").status == 200
        chart = page.locator("#chart-energy")
        chart.locator(".main-svg").first.wait_for()
        legend = chart.locator(".legendtext").all_text_contents()  # SVG text
        # (Plotly lists a stack's traces top first.)
        assert sorted(legend) == ["4 other hosts"] + [f"node-{h:02d}" for h in range(4, 12)], width
        assert "the 8 hosts using the most, then 4 others as one bar" in chart.locator(
            ".gtitle").text_content()
        overflow = page.evaluate("document.documentElement.scrollWidth"
                                 " - document.documentElement.clientWidth")
        assert overflow <= 0, f"scrolls sideways by {overflow} px at {width}"
        if shots:  # GREENOPS_SHOTS=DIR keeps the chart's screenshots to look at
            chart.scroll_into_view_if_needed()
            chart.screenshot(path=f"{shots}/energy-top-hosts-{width}.png")
            page.screenshot(path=f"{shots}/home-top-hosts-{width}.png", full_page=True)
