"""The hosts page in a browser: an agent that stopped sending and a data lag are visible at
desktop and phone widths (screenshots in /work/notes/shots/ when that folder exists)."""

from __future__ import annotations

import datetime as dt
from pathlib import Path

import pytest
from django.utils import timezone

from greenops.telemetry.models import Host, IngestBatch
from tests.support.browser import log_in
from tests.support.factories import make_host

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]
SHOTS = Path("/work/notes/shots")


def test_hosts_page_shows_a_silent_agent_and_a_data_lag(live_server, page, users,  # noqa: F811
                                                        team):
    now = timezone.now()
    silent, _ = make_host(team, "gpu-silent")
    busy, _ = make_host(team, "gpu-busy")
    Host.objects.filter(id=silent.id).update(last_seen=now - dt.timedelta(minutes=10))
    Host.objects.filter(id=busy.id).update(last_seen=now)
    for age_s in (90, 30):
        IngestBatch.objects.create(host=busy, received_at=now - dt.timedelta(seconds=age_s),
                                   n_samples=80, payload=b"{}")
    log_in(page, live_server.url, "member", "pw-member")
    page.goto(f"{live_server.url}/teams/{team.slug}/hosts/")
    silent_row = page.locator('tr[data-host="gpu-silent"]')
    busy_row = page.locator('tr[data-host="gpu-busy"]')
    assert "agent stopped sending 10\xa0minutes ago" in silent_row.inner_text()
    assert "2 batches not yet stored" in busy_row.locator(".data-lag").inner_text()
    for width in (1440, 390):
        page.set_viewport_size({"width": width, "height": 900})
        if SHOTS.is_dir():
            page.screenshot(path=str(SHOTS / f"ops-hosts-trouble-{width}.png"), full_page=True)
