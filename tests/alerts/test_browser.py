"""A member sets up an alert in Chromium: create a rule, see it fire on seeded data, silence
it, and see the notification and its delivery recorded. Screenshots of each page at 1440 and
390 px go to $SHOTS_DIR when it is set."""

from __future__ import annotations

import datetime as dt
import os

import pytest
from django.utils import timezone

from greenops import windows
from greenops.alerts import channels, tasks
from greenops.alerts.models import Notification, Rule
from greenops.kpis import rollup
from tests.support.browser import log_in
from tests.support.factories import make_host
from tests.support.kpis import add_gpu_hour

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]
SHOTS = os.environ.get("SHOTS_DIR", "")


def shoot(page, name: str) -> None:  # noqa: F811
    if not SHOTS:
        return
    for width in (1440, 390):
        page.set_viewport_size({"width": width, "height": 900})
        page.wait_for_timeout(400)  # Plotly's responsive resize runs after the resize event
        page.screenshot(path=f"{SHOTS}/alerts-{name}-{width}.png", full_page=True)
    page.set_viewport_size({"width": 1280, "height": 900})


def test_create_fire_silence_and_see_the_notification(live_server, page, users, team,  # noqa: F811
                                                      mailoutbox):
    # Seeded data: one GPU at 3 % utilisation for the last whole hour, rolled up as beat does.
    hour = windows.floor_hour(timezone.now()) - dt.timedelta(hours=1)
    host, _ = make_host(team, "gpu-node-1", gpus=1)
    add_gpu_hour(host.gpus.get(), hour, 360_000, 3.0, 60)
    rollup.rebuild(team, hour, hour + dt.timedelta(hours=1))
    channels.create(team, {"name": "On-call mail", "kind": "email",
                           "target": "oncall@example.com", "send_resolved": True})

    log_in(page, live_server.url, "member", "pw-member")
    page.goto(f"{live_server.url}/teams/{team.slug}/")
    page.get_by_role("navigation", name="Team sections").get_by_role("link", name="Alerts").click()
    page.get_by_role("heading", name="Alerts of Vision").wait_for()
    shoot(page, "list-empty")
    page.get_by_role("link", name="New alert rule").click()
    page.locator("input[name=name]").fill("GPUs sitting idle")
    page.locator("select[name=kpi]").select_option("gpu_util_pct")
    page.locator("select[name=scope]").select_option("host=gpu-node-1")
    page.locator("select[name=direction]").select_option("below")
    page.locator("input[name=fire_level]").fill("10")
    page.locator("input[name=clear_level]").fill("15")
    page.locator("input[name=for_minutes]").fill("0")
    page.get_by_label("On-call mail").check()
    shoot(page, "form")
    # Budget fields are hidden for a threshold rule; switching kind shows them.
    assert not page.locator("input[name=forecast_min_days]").is_visible()
    page.get_by_role("button", name="Save rule").click()
    page.get_by_text("not evaluated yet").wait_for()
    rule = Rule.objects.get()

    # Beat's minute: evaluate every rule, then deliver what is due (tasks run in-process here).
    tasks.evaluate_rules()
    tasks.deliver_due()
    page.reload()
    assert page.locator("#rule-state").inner_text() == "Firing"
    # 3 % average utilisation over the last whole hour, below 10 %.
    detail = page.locator("#rule-detail").inner_text()
    assert "GPU utilisation 3 % over the last whole hour" in detail
    page.locator("[data-figure][data-rendered='true']").wait_for()
    row = page.locator("#rule-notifications tbody tr").first
    assert "Firing" in row.inner_text() and "Sent" in row.inner_text()
    assert "On-call mail" in row.inner_text()
    assert mailoutbox[0].subject == "[FIRING] GPUs sitting idle · Vision"
    shoot(page, "rule-firing")

    page.locator("select[name=hours]").select_option("24")
    page.get_by_role("button", name="Silence", exact=True).click()
    page.locator("#muted").wait_for()
    assert page.locator("#muted").inner_text().startswith("silenced until")
    rule.refresh_from_db()
    assert rule.silenced_until > timezone.now() + dt.timedelta(hours=23)

    page.get_by_role("navigation", name="Alerts").get_by_role("link", name="Rules").click()
    assert "Firing" in page.locator("#rules").inner_text()
    assert "silenced" in page.locator("#rules").inner_text()
    assert "Sent" in page.locator("#notifications").inner_text()
    shoot(page, "list")
    assert Notification.objects.get().status == "sent"

    page.get_by_role("link", name="Channels").click()
    page.get_by_role("heading", name="Alert channels of Vision").wait_for()
    assert "oncall@example.com" in page.locator("#channels").inner_text()
    shoot(page, "channels")


def test_admin_adds_a_webhook_and_sends_a_real_test(live_server, page, users, team):  # noqa: F811
    from tests.support.alerts import Receiver

    with Receiver() as rx:
        log_in(page, live_server.url, "owner", "pw-owner")
        page.goto(f"{live_server.url}/teams/{team.slug}/alerts/channels/")
        page.locator("input[name=name]").fill("Ops webhook")
        page.locator("select[name=kind]").select_option("webhook")
        page.locator("input[name=target]").fill(rx.url + "/greenops")
        page.get_by_role("button", name="Add channel").click()
        secret = page.locator("#webhook-secret").inner_text()
        assert secret.startswith("whsec_")
        shoot(page, "channels-admin")
        page.get_by_role("button", name="Send test").click()
        page.get_by_text("Test sent to Ops webhook with live figures.").wait_for()
    [(path, headers, body)] = rx.requests
    assert path == "/greenops" and headers["X-GreenOps-Signature"].startswith("sha256=")
    assert "Test sent" in page.locator("#channels").inner_text()  # its last delivery
