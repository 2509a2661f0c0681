"""Variant comparison (issue 14): one workload over two periods (fp16, then int8 after a
redeploy) and two workloads over one period, against hand-computed figures and noise tests."""

from __future__ import annotations

import datetime as dt

import pytest

from greenops import windows
from greenops.advisor import variants
from greenops.workloads.models import Workload
from tests.support.advisor import FP16_J, INT8_J, T0, hours


@pytest.fixture
def chat(team):
    return Workload.objects.create(team=team, name="Chat", slug="chat", kind="inference")


def side(wl, start, n_hours):
    return variants.Side(wl, variants.hour_window(start, start + dt.timedelta(hours=n_hours)))


@pytest.mark.django_db
def test_two_periods_of_one_workload_hand_computed(team, chat):
    hours(team, chat, T0, FP16_J)
    later = T0 + dt.timedelta(hours=10)
    hours(team, chat, later, INT8_J)
    c = variants.compare(team, side(chat, T0, 6), side(chat, later, 6))
    lines = {line.key: line for line in c.lines}
    e = lines["energy_per_inference_j"]
    # A: 2,400,000 J / 6,000 inferences = 400 J; B: 1,500,000 / 6,000 = 250 J; 250/400 - 1.
    assert (e.a, e.b) == (pytest.approx(400.0), pytest.approx(250.0))
    assert e.change_pct == pytest.approx(-37.5)
    # Every int8 hour is below every fp16 hour: exact two-sided p = 2 / C(12, 6) = 2 / 924.
    assert e.p_value == pytest.approx(2 / 924) and e.verdict == "beyond noise"
    assert e.hours == (6, 6)
    cost = lines["cost_per_1k_inferences_usd"]
    # $18 / 6,000 inferences x 1,000 = $3.00 on both sides: no difference, all hours tied.
    assert (cost.a, cost.b, cost.change_pct) == (pytest.approx(3.0), pytest.approx(3.0),
                                                 pytest.approx(0.0))
    assert cost.verdict == "within noise" and cost.p_value == 1.0
    # 1,000 inferences per 3,600 s measured.
    assert lines["throughput_per_s"].a == pytest.approx(1000 / 3600)
    assert lines["gpu_util_pct"].a == pytest.approx(50.0)
    # No latency histograms were sent: unknown, not 0.
    assert lines["latency_p99_ms"].verdict == "unknown"
    assert lines["latency_p99_ms"].reason == "not measured in A"
    assert c.requests == (6000, 6000)


@pytest.mark.django_db
def test_too_few_hours_cannot_be_beyond_noise(team, chat):
    int8 = Workload.objects.create(team=team, name="Chat int8", slug="chat-int8",
                                   kind="inference")
    hours(team, chat, T0, FP16_J)
    hours(team, int8, T0, INT8_J[:2])
    c = variants.compare(team, side(chat, T0, 6), side(int8, T0, 6))
    e = c.lines[0]
    # 2,400,000 / 6,000 = 400 J vs (251,000 + 255,000) / 2,000 = 253 J: 253/400 - 1.
    assert e.b == pytest.approx(253.0) and e.change_pct == pytest.approx(-36.75)
    # The smallest p 6 against 2 values can reach is 2 / C(8, 2) = 0.0714 >= 0.05.
    assert e.verdict == "too few hours" and e.p_value is None


@pytest.mark.django_db
def test_compare_page_and_its_field_errors(client, team_roles, team, chat):
    hours(team, chat, T0, FP16_J)
    later = T0 + dt.timedelta(hours=10)
    hours(team, chat, later, INT8_J)
    client.force_login(team_roles["viewer"])
    url = f"/teams/{team.slug}/advisor/compare/"
    r = client.get(url, {"a": "chat", "a_start": "2026-11-20T00:00", "a_end": "2026-11-20T06:00",
                         "b": "chat", "b_start": "2026-11-20T10:00",
                         "b_end": "2026-11-20T16:00"})
    assert r.status_code == 200
    html = r.content.decode()
    assert "-37.5 %" in html and "beyond noise" in html
    bad = client.get(url, {"a": "chat", "b": "nope"})
    assert bad.status_code == 400 and "must be one of this team" in bad.content.decode()
    bad = client.get(url, {"a": "chat", "a_start": "2026-11-20T06:00",
                           "a_end": "2026-11-20T01:00"})
    assert bad.status_code == 400 and "<code>a_end</code>" in bad.content.decode()
    bad = client.get(url, {"a": "chat", "a_start": "yesterday"})
    assert bad.status_code == 400 and "<code>a_start</code>" in bad.content.decode()


def test_hour_window_rounds_out_to_whole_hours():
    w = variants.hour_window(dt.datetime(2026, 11, 20, 0, 30, tzinfo=dt.UTC),
                             dt.datetime(2026, 11, 20, 5, 10, tzinfo=dt.UTC))
    assert (w.start.hour, w.end.hour, w.span_s) == (0, 6, 6 * 3600)
    assert isinstance(w, windows.Window)


# ---- Marked pairs ---------------------------------------------------------------------------

def pair_form(**over) -> dict:
    form = {"label": "fp16 vs int8", "a": "chat", "a_start": "2026-11-20T00:00",
            "a_end": "2026-11-20T06:00", "b": "chat", "b_start": "2026-11-20T10:00",
            "b_end": "2026-11-20T16:00", "note": "int8 weights after the redeploy"}
    form.update(over)
    return form


@pytest.mark.django_db
@pytest.mark.parametrize(("over", "field", "says"), [
    ({"label": " "}, "label", "name the pair"),
    ({"a": "nope"}, "a", "must be one of this team"),
    ({"b": ""}, "b", "must be one of this team"),
    ({"a_end": ""}, "a_end", "both ends"),
    ({"b_start": ""}, "b_start", "both ends"),
    ({"a_end": "2026-11-19T00:00"}, "a_end", "after the start"),
    ({"b_start": "yesterday"}, "b_start", "ISO 8601"),
    ({"b_start": "2026-11-20T00:00", "b_end": "2026-11-20T06:00"}, "b", "same workload"),
    ({"label": "x" * 101}, "label", "at most 100"),
])
def test_pair_errors_name_the_field_and_store_nothing(team, chat, over, field, says):
    from greenops.advisor.models import VariantPair
    from greenops.errors import FieldError

    with pytest.raises(FieldError) as exc:
        variants.create_pair(team, pair_form(**over))
    assert exc.value.field == field and says in exc.value.message
    assert not VariantPair.objects.exists()


@pytest.mark.django_db
def test_pair_rounds_periods_to_hours_and_labels_are_unique(team, chat):
    from greenops.errors import FieldError

    pair = variants.create_pair(team, pair_form(a_start="2026-11-20T00:30",
                                                a_end="2026-11-20T05:10"))
    # Stored as the whole hours compared: 00:00 to 06:00.
    assert (pair.a_start.hour, pair.a_end.hour) == (0, 6)
    with pytest.raises(FieldError) as exc:
        variants.create_pair(team, pair_form())
    assert exc.value.field == "label" and "already" in exc.value.message
    # Two workloads without periods: compared over whatever range the page picks.
    other = Workload.objects.create(team=team, name="Chat int8", slug="chat-int8",
                                    kind="inference")
    both = variants.create_pair(team, {"label": "teacher vs distilled", "a": "chat",
                                       "b": other.slug})
    w = variants.hour_window(T0, T0 + dt.timedelta(hours=6))
    a, b = variants.pair_sides(both, w)
    assert (a.window, b.window, a.workload, b.workload) == (w, w, chat, other)


@pytest.mark.django_db
def test_member_marks_compares_and_deletes_a_pair(client, team_roles, team, chat):
    from greenops.advisor.models import VariantPair

    hours(team, chat, T0, FP16_J)
    hours(team, chat, T0 + dt.timedelta(hours=10), INT8_J)
    client.force_login(team_roles["member"])
    base = f"/teams/{team.slug}/advisor/variants/"
    r = client.post(base + "new", pair_form())
    pair = VariantPair.objects.get()
    assert r.status_code == 302 and r["Location"] == f"{base}{pair.id}/"
    assert (pair.created_by, pair.note) == (team_roles["member"],
                                            "int8 weights after the redeploy")
    html = client.get(f"{base}{pair.id}/").content.decode()
    # The same hand-computed figures as the ad-hoc comparison: 400 J -> 250 J, -37.5 %.
    assert "fp16 vs int8" in html and "-37.5 %" in html and "beyond noise" in html
    assert "Mann–Whitney U" in html  # the page names its test
    listing = client.get(base).content.decode()
    assert 'id="pair-form"' in listing and "fp16 vs int8" in listing
    # A bad submission is a 400 naming the field, and the form keeps what was typed.
    bad = client.post(base + "new", pair_form(label="second", a_end="2026-11-19T00:00"))
    # ... in the form's own words: the field the user typed into is labelled "A to".
    assert bad.status_code == 400 and 'id="pair-error">A to:' in bad.content.decode()
    assert 'value="second"' in bad.content.decode()
    assert VariantPair.objects.count() == 1
    assert client.post(f"{base}{pair.id}/delete").status_code == 302
    assert not VariantPair.objects.exists()
    # A second click finds nothing to delete and lands on the list again.
    assert client.post(f"{base}{pair.id}/delete").status_code == 302


@pytest.mark.django_db
def test_viewer_sees_pairs_but_no_form_and_other_teams_see_nothing(client, team_roles, team,
                                                                   chat):
    pair = variants.create_pair(team, pair_form())
    client.force_login(team_roles["viewer"])
    listing = client.get(f"/teams/{team.slug}/advisor/variants/").content.decode()
    assert "fp16 vs int8" in listing and 'id="pair-form"' not in listing
    assert "Delete" not in listing
    assert client.post(f"/teams/{team.slug}/advisor/variants/{pair.id}/delete"
                       ).status_code == 403
    client.force_login(team_roles["outsider"])
    assert client.get(f"/teams/{team.slug}/advisor/variants/{pair.id}/").status_code == 404


@pytest.mark.django_db
def test_a_pair_of_another_team_is_not_found(client, team_roles, team, chat):
    from greenops.teams.models import Membership, Team

    pair = variants.create_pair(team, pair_form())
    other = Team.objects.create(name="Other", slug="other")
    Membership.objects.create(team=other, user=team_roles["owner"], role="owner")
    client.force_login(team_roles["owner"])
    assert client.get(f"/teams/other/advisor/variants/{pair.id}/").status_code == 404
    assert client.post(f"/teams/other/advisor/variants/{pair.id}/delete").status_code == 302
    assert variants.VariantPair.objects.filter(id=pair.id).exists()  # not deleted


@pytest.mark.django_db
def test_workload_diagnosis_links_its_marked_pairs(client, team_roles, team, chat):
    pair = variants.create_pair(team, pair_form())
    client.force_login(team_roles["viewer"])
    html = client.get(f"/teams/{team.slug}/advisor/workloads/chat/").content.decode()
    assert f'href="/teams/{team.slug}/advisor/variants/{pair.id}/">fp16 vs int8</a>' in html
