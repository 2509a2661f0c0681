"""Every team page, as a team owner sees it, at 1440 px and on a 390 px phone: it loads without
console errors and without sideways scrolling, and the home leads with its headline figures."""

from __future__ import annotations

import os

import pytest

from tests.support.browser import log_in
from tests.support.factories import make_batch

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]

TEAM_PAGES = [
    "", "?range=hour", "?range=quarter", "kpis/", "kpis/?range=hour", "workloads/",
    "benchmarks/", "advisor/variants/", "advisor/compare/", "hosts/",
    "hosts/add/", "hosts/{host}/", "hosts/{host}/edit/", "carbon/runs/", "carbon/sites/",
    "carbon/sites/new/", "costs/", "costs/prices/", "alerts/", "alerts/channels/", "reports/",
    "members/", "permissions/", "api-tokens/", "audit/", "settings/",
]


def test_every_team_page_fits_a_phone_and_a_desktop(live_server, page, users, team,  # noqa: F811
                                                    host, post_batch):
    host_row, token = host
    import datetime as dt

    from django.utils import timezone

    from greenops.kpis import rollup

    now = timezone.now()
    # Two minutes of samples in the last finished hour: figures count whole finished hours.
    last_hour = (now.timestamp() // 3600 - 1) * 3600
    assert post_batch(token, make_batch(n_per_gpu=120, step=1.0,
                                        start=last_hour + 600)).status_code == 202
    rollup.rebuild(team, now - dt.timedelta(hours=2), now + dt.timedelta(hours=1))  # as beat does
    errors: list[str] = []
    page.on("console", lambda m: errors.append(f"{page.url}: {m.text}")
            if m.type == "error" else None)
    page.on("pageerror", lambda e: errors.append(f"{page.url}: {e}"))
    log_in(page, live_server.url, "owner", "pw-owner")
    base = f"{live_server.url}/teams/{team.slug}/"
    shots = os.environ.get("GREENOPS_SHOTS")
    for width in (1440, 390):
        page.set_viewport_size({"width": width, "height": 900})
        for path in TEAM_PAGES:
            response = page.goto(base + path.format(host=host_row.id))
            assert response.status == 200, (path, response.status)
            page.wait_for_load_state("load")
            if page.locator("[data-figure]").count():
                page.locator("[data-figure][data-rendered='true']").first.wait_for()
            overflow = page.evaluate("document.documentElement.scrollWidth"
                                     " - document.documentElement.clientWidth")
            assert overflow <= 0, f"{path or 'home'} scrolls sideways by {overflow} px at {width}"
            if shots and path in ("", "kpis/"):
                # GREENOPS_SHOTS=DIR keeps full-page screenshots to look at (not asserted).
                name = path.strip("/") or "home"
                page.screenshot(path=f"{shots}/{name}-{width}.png", full_page=True)
        page.goto(base)
        for key in ("cost_usd", "energy_kwh", "co2e_kg", "gpu_util_pct"):
            text = page.locator(f"[data-kpi='{key}']").first.inner_text()
            assert any(ch.isdigit() for ch in text), (key, text)
    assert errors == []
