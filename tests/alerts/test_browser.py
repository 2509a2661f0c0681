"""A member sets up an alert in Chromium: create a rule, see it fire on seeded data, silence
it, and see the notification and its delivery recorded. Screenshots of each page at 1440 and
390 px go to $SHOTS_DIR when it is set."""

from __future__ import annotations

import datetime as dt
import hashlib
import hmac
import json
import os
import socket

import pytest
from django.utils import timezone

from greenops import windows
from greenops.alerts import channels, evaluate, tasks
from greenops.alerts.models import Notification, Rule
from greenops.kpis import rollup
from greenops.telemetry.models import Host
from tests.support.alerts import Receiver, confirmed
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


def fill_idle_gpus_rule(page, **inputs: str) -> None:
    """On the new-rule form: "GPUs sitting idle", GPU utilisation of gpu-node-1 below 10 %,
    firing at once; `inputs` fills more of the form's inputs by name."""
    page.get_by_role("link", name="New alert rule").click()
    page.locator("input[name=name]").fill("GPUs sitting idle")
    page.locator("select[name=kpi]").select_option("gpu_util_pct")
    page.locator("select[name=scope]").select_option("host=gpu-node-1")
    page.locator("select[name=direction]").select_option("below")
    page.locator("input[name=fire_level]").fill("10")
    page.locator("input[name=for_minutes]").fill("0")
    for name, value in inputs.items():
        page.locator(f"input[name={name}]").fill(value)


def test_create_fire_silence_and_see_the_notification(live_server, page, users, team,  # noqa: F811
                                                      mailoutbox):
    # Seeded data: one GPU at 3 % utilisation for the last whole hour, rolled up as beat does.
    hour = windows.floor_hour(timezone.now()) - dt.timedelta(hours=1)
    host, _ = make_host(team, "gpu-node-1", gpus=1)
    add_gpu_hour(host.gpus.get(), hour, 360_000, 3.0, 60)
    rollup.rebuild(team, hour, hour + dt.timedelta(hours=1))
    channels.create(team, {"name": "On-call mail", "kind": "email",
                           "target": "oncall@example.com", "send_resolved": True})
    confirmed(team, "oncall@example.com")  # clicked the confirmation link

    log_in(page, live_server.url, "member", "pw-member")
    page.goto(f"{live_server.url}/teams/{team.slug}/")
    page.get_by_role("navigation", name="Team sections").get_by_role("link", name="Alerts").click()
    page.get_by_role("heading", name="Alerts of Vision").wait_for()
    shoot(page, "list-empty")
    fill_idle_gpus_rule(page, clear_level="15")
    page.get_by_label("On-call mail").check()
    shoot(page, "form")
    # Budget fields are hidden for a threshold rule; switching kind shows them.
    assert not page.locator("input[name=forecast_min_days]").is_visible()
    page.get_by_role("button", name="Save rule").click()
    # Judged at once when saved: no wait for beat's next minute.
    assert page.locator("#rule-state").inner_text() == "Firing"
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
    # The silence closed the incident at the receiver: a RESOLVED that says it was muted.
    firing, resolved = Notification.objects.order_by("id")
    assert (firing.kind, firing.status) == ("firing", "sent")
    assert resolved.kind == "resolved" and resolved.payload["closed_by"] == "muted"

    page.get_by_role("link", name="Channels").click()
    page.get_by_role("heading", name="Alert channels of Vision").wait_for()
    assert "oncall@example.com" in page.locator("#channels").inner_text()
    shoot(page, "channels")


def test_admin_adds_a_webhook_and_sends_a_real_test(live_server, page, users, team, settings):
    settings.GREENOPS_OUTBOUND_ALLOW = ["127.0.0.1/32"]  # the receiver is on loopback
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
    [(path, headers, body, _)] = rx.requests
    assert path == "/greenops" and headers["X-GreenOps-Signature"].startswith("sha256=")
    assert "Test sent" in page.locator("#channels").inner_text()  # its last delivery


def test_journey_fire_edit_resolve_midnight_and_metadata_refused(
        live_server, page, users, team, settings, monkeypatch, outbound_connects):  # noqa: F811
    """The alerts journey of issue 31, in Chromium against a real receiver on 127.0.0.1
    (allowed by the operator setting): create a rule, see it fire, edit it while firing and
    receive "resolved", cross midnight in silence, and point a webhook at 169.254.169.254 and
    be refused before any connection."""
    settings.GREENOPS_OUTBOUND_ALLOW = ["127.0.0.1/32"]
    # One GPU at 3 % utilisation over the last whole hour, rolled up as beat does.
    now = timezone.now()
    # The team's zone puts now near its midday, whatever the UTC hour: in its first local hour
    # "today so far" holds no whole hour, so a rule on it has nothing to judge (this journey
    # failed when run from 00:00 to 00:59 UTC with the team on UTC).
    east = 12 - now.hour
    team.time_zone = f"Etc/GMT{-east:+d}" if east else "UTC"  # Etc/GMT-5 is UTC+5
    team.save(update_fields=["time_zone"])
    tz = windows.time_zone(team.time_zone)
    last = windows.floor_hour(now) - dt.timedelta(hours=1)
    host, _ = make_host(team, "gpu-node-1", gpus=1)
    gpu = host.gpus.get()
    add_gpu_hour(gpu, last, 360_000, 3.0, 60)
    rollup.rebuild(team, last, last + dt.timedelta(hours=1))

    def received() -> list[str]:
        return [a["kind"] for _, _, body, _ in rx.requests
                for a in json.loads(body)["alerts"]]

    with Receiver() as rx:
        log_in(page, live_server.url, "owner", "pw-owner")
        page.goto(f"{live_server.url}/teams/{team.slug}/alerts/channels/")
        page.locator("input[name=name]").fill("Incident webhook")
        page.locator("select[name=kind]").select_option("webhook")
        page.locator("input[name=target]").fill(rx.url + "/incidents")
        page.get_by_role("button", name="Add channel").click()
        secret = page.locator("#webhook-secret").inner_text()

        # 1. Create a rule; it is judged when saved and fires.
        page.get_by_role("navigation", name="Alerts").get_by_role("link", name="Rules").click()
        fill_idle_gpus_rule(page, repeat_minutes="0")
        page.get_by_label("Incident webhook").check()
        page.get_by_role("button", name="Save rule").click()
        assert page.locator("#rule-state").inner_text() == "Firing"
        assert "GPU utilisation 3 % over the last whole hour" in \
            page.locator("#rule-detail").inner_text()
        tasks.deliver_due()  # beat's delivery
        assert received() == ["firing"]
        _, headers, body, _ = rx.requests[0]
        ts = headers["X-GreenOps-Timestamp"]
        assert headers["X-GreenOps-Signature"] == "sha256=" + hmac.new(
            secret.encode(), ts.encode() + b"." + body, hashlib.sha256).hexdigest()
        page.reload()
        shoot(page, "journey-rule-firing")

        # 2. Edit it while firing: at "below 2 %", 3 % no longer holds -> resolved at once.
        page.get_by_role("link", name="Edit", exact=True).click()
        page.locator("input[name=fire_level]").fill("2")
        page.get_by_role("button", name="Save rule").click()
        assert page.locator("#rule-state").inner_text() == "OK"
        tasks.deliver_due()
        assert received() == ["firing", "resolved"]
        resolved = json.loads(rx.requests[1][2])["alerts"][0]
        assert resolved["threshold"]["fire"] == 2.0 and resolved["value"] == pytest.approx(3.0)
        rule = Rule.objects.get()

        # 3. "Today so far" below 10 %: fires again (a new episode), then crosses the team's
        # next midnight with the host reporting 3 % every hour: silence.
        page.get_by_role("link", name="Edit", exact=True).click()
        page.locator("input[name=fire_level]").fill("10")
        page.locator("select[name=window]").select_option("day")
        page.get_by_role("button", name="Save rule").click()
        assert page.locator("#rule-state").inner_text() == "Firing"
        tasks.deliver_due()
        assert received() == ["firing", "resolved", "firing"]
        local = now.astimezone(tz)
        midnight = (local.replace(hour=0, minute=0, second=0, microsecond=0)
                    + dt.timedelta(days=1)).astimezone(dt.UTC)
        for h in range(-3, 3):
            if midnight + dt.timedelta(hours=h) != last:  # that hour holds the reading already
                add_gpu_hour(gpu, midnight + dt.timedelta(hours=h), 360_000, 3.0, 60)
        t = midnight - dt.timedelta(hours=1)
        while t <= midnight + dt.timedelta(hours=2):
            Host.objects.filter(id=host.id).update(last_seen=t)
            rule.refresh_from_db()
            evaluate.run(rule, t)
            tasks.deliver_channel(rule.channels.get().id)
            if t == midnight + dt.timedelta(minutes=30):
                page.reload()
                detail = page.locator("#rule-detail").inner_text()
                assert "first whole hour has not ended; the rule keeps its state" in detail
                assert page.locator("#rule-state").inner_text() == "Firing"
                shoot(page, "journey-rule-midnight")
            t += dt.timedelta(minutes=10)
        rule.refresh_from_db()
        assert rule.state == "firing" and received() == ["firing", "resolved", "firing"]

        # 4. A webhook at the cloud metadata address: refused when saved, before any
        # connection; and a name that resolves there is refused at the send, on the address.
        page.goto(f"{live_server.url}/teams/{team.slug}/alerts/channels/")
        page.locator("input[name=name]").fill("Metadata")
        page.locator("select[name=kind]").select_option("webhook")
        page.locator("input[name=target]").fill("http://169.254.169.254/latest/meta-data/")
        page.get_by_role("button", name="Add channel").click()
        error = page.get_by_role("alert").inner_text()
        assert "169.254.169.254 is a cloud instance metadata address" in error
        shoot(page, "journey-channel-refused")
        real = socket.getaddrinfo

        def dns(hostname, *args, **kwargs):
            if hostname == "metadata.attacker.example":
                return [(socket.AF_INET, socket.SOCK_STREAM, 6, "", ("169.254.169.254", 80))]
            return real(hostname, *args, **kwargs)

        monkeypatch.setattr(socket, "getaddrinfo", dns)
        page.locator("input[name=name]").fill("Sneaky")
        page.locator("select[name=kind]").select_option("webhook")
        page.locator("input[name=target]").fill("http://metadata.attacker.example/latest/")
        page.get_by_role("button", name="Add channel").click()
        page.locator("#created").wait_for()
        row = page.locator("#channels tbody tr", has_text="Sneaky")
        row.get_by_role("button", name="Send test").click()
        result = page.locator("#test-result")
        result.wait_for()
        page.wait_for_function(
            "document.getElementById('test-result').dataset.done === 'true'")
        assert result.inner_text() == ("Test to Sneaky failed: could not connect to the "
                                       "receiver (the address is not allowed for outbound "
                                       "alerts, or nothing answered)")
        shoot(page, "journey-channels")
    assert all(address[0] != "169.254.169.254" for address in outbound_connects)
    assert {address[0] for address in outbound_connects} == {"127.0.0.1"}
    assert received() == ["firing", "resolved", "firing"]
