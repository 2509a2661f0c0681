"""Alerts pages and API: create, edit, silence, the rule page, and bad input naming its field."""

from __future__ import annotations

import datetime as dt
import json

import pytest
from django.utils import timezone

from dashboards.templatetags.readable import field_label
from greenops.alerts import channels, evaluate
from greenops.alerts.models import Rule
from tests.support.alerts import RULE_FORM, make_rule, rollup

pytestmark = pytest.mark.django_db


@pytest.fixture
def member(client, users, team):
    client.force_login(users["member"])
    return client


def test_create_rule_through_the_form(member, team, host):
    ch, _ = channels.create(team, {"name": "oncall", "kind": "email", "target": "a@b.example"})
    form = {**RULE_FORM, "scope": "host=gpu-node-1", "channels": [str(ch.id)],
            "clear_level": "15", "mute_weekdays": ["5", "6"]}
    resp = member.post("/teams/vision/alerts/new/", form)
    rule = Rule.objects.get()
    assert resp.status_code == 302 and resp["Location"] == f"/teams/vision/alerts/{rule.id}/"
    assert (rule.kpi, rule.direction, rule.fire_level, rule.clear_level) == \
        ("gpu_util_pct", "below", 10.0, 15.0)
    assert rule.host == host[0] and rule.mute_weekdays == "5,6"
    assert list(rule.channels.all()) == [ch]
    edit = member.get(f"/teams/vision/alerts/{rule.id}/edit/").content.decode()
    assert 'value="host=gpu-node-1" selected' in edit


@pytest.mark.parametrize(("change", "field", "words"), [
    ({"name": ""}, "name", "give the rule a name"),
    ({"kpi": "nonsense"}, "kpi", "must be one of"),
    ({"fire_level": "ten"}, "fire_level", "must be a number"),
    ({"fire_level": ""}, "fire_level", "is required"),
    ({"direction": "above", "fire_level": "10", "clear_level": "12"}, "clear_level",
     "clears at or below"),
    ({"for_minutes": "-1"}, "for_minutes", "between 0 and 1440"),
    ({"kpi": "energy_per_inference_j", "scope": "host=gpu-node-1"}, "kpi",
     "needs inference counts"),
    ({"kind": "budget", "kpi": "gpu_util_pct"}, "kpi", "a budget is for spend"),
    ({"mute_start_hour": "22"}, "mute_end_hour", "needs a start and an end"),
    ({"scope": "host=nope"}, "host", "no host &#x27;nope&#x27; in this team"),
])
def test_bad_form_input_names_the_field_and_stores_nothing(member, host, change, field, words):
    resp = member.post("/teams/vision/alerts/new/", {**RULE_FORM, **change})
    assert resp.status_code == 400
    html = resp.content.decode()
    label = field_label(field)  # the user's words, never the code name
    assert f"Not saved — {label}:" in html and words in html
    assert f"Not saved — {field}:" not in html or label == field
    assert f'id="error-{field}"' in html
    assert not Rule.objects.exists()


def test_api_create_read_update_and_field_errors(member, team):
    channels.create(team, {"name": "oncall", "kind": "email", "target": "a@b.example"})
    body = {"name": "Spend", "kind": "budget", "kpi": "cost_usd", "fire_level": 500,
            "channels": ["oncall"], "mute_weekdays": [5, 6]}
    r = member.post("/api/v1/teams/vision/alerts", json.dumps(body),
                    content_type="application/json")
    assert r.status_code == 201, r.content
    doc = r.json()
    assert (doc["kind"], doc["window"], doc["fire_level"], doc["channels"]) == \
        ("budget", "month", 500.0, ["oncall"])
    assert doc["state"]["state"] == "ok" and doc["mute_weekdays"] == [5, 6]
    rid = doc["id"]
    r = member.put(f"/api/v1/teams/vision/alerts/{rid}", json.dumps({**body, "fire_level": 600}),
                   content_type="application/json")
    assert r.status_code == 200 and r.json()["fire_level"] == 600.0
    for bad, field in [({**body, "fire_level": -1}, "fire_level"),
                       ({**body, "channels": ["nope"]}, "channels"),
                       ({**body, "colour": "red"}, "colour"),
                       ({**body, "kind": "magic"}, "kind"),
                       ({**body, "workload": "nope"}, "workload")]:
        r = member.post("/api/v1/teams/vision/alerts", json.dumps(bad),
                        content_type="application/json")
        assert r.status_code == 422 and r.json()["field"] == field, (bad, r.content)
    r = member.post(f"/api/v1/teams/vision/alerts/{rid}/silence", json.dumps({"until": "soon"}),
                    content_type="application/json")
    assert r.status_code == 422 and r.json()["field"] == "until"
    assert Rule.objects.count() == 1


def test_api_silence_stores_any_offset_in_utc_and_names_until_when_it_cannot(member, team):
    """Found by schemathesis once it reached a real rule: PostgreSQL refuses an offset beyond
    15:59 (-17:16 reached it as a DataError), and year 1 at +01:00 is before year 1 in UTC."""
    rule = Rule.objects.create(team=team, name="Spend", kind="budget", kpi="cost_usd",
                               window="month", fire_level=500)
    url = f"/api/v1/teams/vision/alerts/{rule.id}/silence"
    r = member.post(url, json.dumps({"until": "2031-03-01T00:12:39-17:16"}),
                    content_type="application/json")
    assert r.status_code == 200, r.content
    rule.refresh_from_db()
    assert rule.silenced_until == dt.datetime(2031, 3, 1, 17, 28, 39, tzinfo=dt.UTC)
    for until, words in [("0001-01-01T00:00+01:00", "between years 1 and 9999"),
                         ("2031-03-01T08:00", "give a time zone"), (5, "ISO 8601")]:
        r = member.post(url, json.dumps({"until": until}), content_type="application/json")
        assert r.status_code == 422 and r.json()["field"] == "until", (until, r.content)
        assert words in r.json()["message"]
    rule.refresh_from_db()
    assert rule.silenced_until == dt.datetime(2031, 3, 1, 17, 28, 39, tzinfo=dt.UTC)


def test_openapi_lists_the_alert_endpoints(client):
    paths = client.get("/api/v1/openapi.json").json()["paths"]
    assert set(paths["/api/v1/teams/{slug}/alerts"]) == {"get", "post"}
    assert set(paths["/api/v1/teams/{slug}/alerts/{rule_id}"]) == {"get", "put", "delete"}
    assert "/api/v1/teams/{slug}/alerts/{rule_id}/silence" in paths


def test_rule_page_shows_state_chart_history_and_notifications(member, team):
    ch, _ = channels.create(team, {"name": "oncall", "kind": "email", "target": "a@b.example"})
    rule = make_rule(team, [ch], name="EPI", clear_level=1.5)
    now = timezone.now()  # the chart shows the last 7 days before the real now
    rollup(team, now.replace(minute=0, second=0, microsecond=0) - dt.timedelta(hours=1),
           gpu_energy_j=3600, requests=1200)
    evaluate.run(rule, now)
    html = member.get(f"/teams/vision/alerts/{rule.id}/").content.decode()
    assert 'id="rule-state">Firing' in html
    assert '"name": "fires at 2"' in html and '"name": "clears at 1.5"' in html
    assert "Energy per inference 3 J over the last whole hour" in html
    assert 'id="rule-notifications"' in html and "Pending" in html
    listing = member.get("/teams/vision/alerts/").content.decode()
    assert "state-firing" in listing and "EPI" in listing


def test_silence_from_the_page(member, team):
    rule = make_rule(team)
    resp = member.post(f"/teams/vision/alerts/{rule.id}/silence/", {"hours": "24"})
    assert resp.status_code == 302
    rule.refresh_from_db()
    assert rule.silenced_until is not None
    assert member.post(f"/teams/vision/alerts/{rule.id}/silence/", {"hours": "7"}
                       ).status_code == 400
    member.post(f"/teams/vision/alerts/{rule.id}/silence/", {"hours": "0"})
    rule.refresh_from_db()
    assert rule.silenced_until is None


def test_channel_page_shows_the_webhook_secret_once_and_masks_targets(client, team_roles, team):
    client.force_login(team_roles["admin"])
    html = client.post("/teams/vision/alerts/channels/new/", {
        "name": "hook", "kind": "webhook", "target": "https://hooks.example.com/in/SECRET123",
        "send_resolved": "on"}).content.decode()
    assert 'id="webhook-secret">whsec_' in html
    again = client.get("/teams/vision/alerts/channels/").content.decode()
    assert "whsec_" not in again and "SECRET123" not in again
    assert "https://hooks.example.com/…/SEC…" in again  # short parts show nothing
    bad = client.post("/teams/vision/alerts/channels/new/", {
        "name": "x", "kind": "webhook", "target": "https://user:pw@"})
    assert bad.status_code == 400 and "Not saved — Target:" in bad.content.decode()


def test_a_week_of_minutely_values_is_thinned_to_the_point_budget_keeping_the_worst():
    import datetime as dt

    from greenops.alerts.page import thin

    t0 = dt.datetime(2026, 11, 1, tzinfo=dt.UTC)
    points = [(t0 + dt.timedelta(minutes=i), 1.0) for i in range(10_080)]
    points[5000] = (points[5000][0], 99.0)  # one minute's breach
    out = thin(points, worst=max, budget=300)
    # ceil(10080 / 300) = 34 points per bucket -> ceil(10080 / 34) = 297 points
    assert len(out) == 297 and max(v for _, v in out) == 99.0
    assert out[-1][0] == points[-1][0]


def test_team_home_lists_the_firing_rules_and_counts_the_enabled_ones(member, team, other_team):
    """The team home's "Firing now": Firing and Recovering rules of enabled rules only, of this
    team only, and "N of M enabled rules" with M counting every enabled rule."""
    make_rule(team, name="EPI high", state="firing")
    make_rule(team, name="Util low", state="recovering")
    make_rule(team, name="Quiet", state="ok")
    make_rule(team, name="Switched off", state="firing", enabled=False)
    make_rule(other_team, name="Other team's", state="firing")
    html = member.get("/teams/vision/").content.decode()
    firing = html.split('id="firing"')[1].split("<h2")[0]
    assert "EPI high" in firing and "Util low" in firing
    assert "Quiet" not in firing and "Switched off" not in firing and "Other team" not in firing
    assert "2 of 3 enabled rules firing" in firing
    Rule.objects.filter(team=team, enabled=True).update(state="ok")
    html = member.get("/teams/vision/").content.decode()
    assert 'id="firing-none">No alerts firing (3 rules)' in html
