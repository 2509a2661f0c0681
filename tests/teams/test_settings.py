"""Owners rename and delete their team; the audit log records workload changes and withdrawn
invitations (audit of issue 4)."""

from __future__ import annotations

import re

import orjson
import pytest

from greenops.teams import invitations, membership
from greenops.teams.models import AuditEvent, Invitation, Membership, Team
from greenops.telemetry.models import Gpu, GpuHour, GpuMinute, GpuSample, Host
from tests.support.factories import make_batch, make_host


def test_owner_renames_the_team_and_the_address_stays(client, users, team):
    client.force_login(users["owner"])
    page = client.get(f"/teams/{team.slug}/settings/").content.decode()
    assert 'id="rename-team"' in page and 'id="delete-team"' in page
    resp = client.post(f"/teams/{team.slug}/settings/", {"name": "  Vision Research  "})
    assert resp.status_code == 302 and resp["Location"] == f"/teams/{team.slug}/settings/"
    team.refresh_from_db()
    assert (team.name, team.slug) == ("Vision Research", "vision")
    event = AuditEvent.objects.get(action="team.renamed")
    assert (event.actor_label, event.target, event.detail) == (
        "owner", "Vision Research", {"old": "Vision", "new": "Vision Research"})


@pytest.mark.parametrize("name", ["", "   ", "x" * 101])
def test_bad_name_changes_nothing(client, users, team, name):
    client.force_login(users["owner"])
    resp = client.post(f"/teams/{team.slug}/settings/", {"name": name})
    assert resp.status_code == 400
    team.refresh_from_db()
    assert team.name == "Vision" and not AuditEvent.objects.filter(action="team.renamed")


def test_owner_sets_the_time_zone_report_months_follow(client, users, team):
    from greenops import windows

    assert team.time_zone == "UTC"  # the default
    client.force_login(users["owner"])
    page = client.get(f"/teams/{team.slug}/settings/").content.decode()
    assert 'id="team-time-zone"' in page and "<option>Europe/Paris</option>" in page
    resp = client.post(f"/teams/{team.slug}/settings/time-zone", {"time_zone": "Europe/Paris"})
    assert resp.status_code == 302
    team.refresh_from_db()
    assert team.time_zone == "Europe/Paris"
    assert "<option selected>Europe/Paris</option>" in client.get(
        f"/teams/{team.slug}/settings/").content.decode()
    event = AuditEvent.objects.get(action="team.time_zone")
    assert event.detail == {"old": "UTC", "new": "Europe/Paris"}
    # Paris is UTC+1 in November: the team's November starts at 23:00 UTC on 31 October.
    month = windows.parse_month("2026-11", team.time_zone)
    assert month.start.isoformat() == "2026-10-31T23:00:00+00:00"


@pytest.mark.parametrize("name", ["", "Paris", "Mars/Olympus", "x" * 80])
def test_unknown_time_zone_changes_nothing(client, users, team, name):
    client.force_login(users["owner"])
    resp = client.post(f"/teams/{team.slug}/settings/time-zone", {"time_zone": name})
    assert resp.status_code == 400
    assert 'id="time-zone-error"' in resp.content.decode()
    assert b"IANA time zone" in resp.content
    team.refresh_from_db()
    assert team.time_zone == "UTC" and not AuditEvent.objects.filter(action="team.time_zone")


def test_model_validation_refuses_an_unknown_time_zone(team):
    from django.core.exceptions import ValidationError

    team.time_zone = "Europe/Atlantis"
    with pytest.raises(ValidationError) as err:
        team.full_clean()
    assert "time_zone" in err.value.message_dict


def test_delete_needs_the_typed_name_then_removes_everything(client, users, team, other_team,
                                                             host, post_batch):
    h, token = host
    theirs, their_token = make_host(other_team, "their-node", gpus=1)
    assert post_batch(token, make_batch(n_per_gpu=3)).status_code == 202
    assert post_batch(their_token, make_batch(n_per_gpu=2, gpus=(0,))).status_code == 202
    client.force_login(users["owner"])
    resp = client.post(f"/teams/{team.slug}/settings/delete", {"confirm": "vision"},
                       follow=True)
    assert b"Type the team&#x27;s name" in resp.content  # case matters: nothing deleted
    assert Team.objects.filter(id=team.id).exists() and GpuSample.objects.count() == 8

    resp = client.post(f"/teams/{team.slug}/settings/delete", {"confirm": "Vision"})
    assert resp.status_code == 302 and resp["Location"] == "/"
    assert not Team.objects.filter(id=team.id).exists()
    assert not Host.objects.filter(id=h.id).exists()
    # Samples and rollups have no database foreign key: only the other team's remain.
    their_gpu = Gpu.objects.get(host=theirs)
    for model in (GpuSample, GpuMinute, GpuHour):
        assert set(model.objects.values_list("gpu_id", flat=True)) == {their_gpu.id}, model
    # The team's own log goes with it; the deletion itself is kept, team-less.
    event = AuditEvent.objects.get(action="team.deleted")
    assert (event.team_id, event.actor_label, event.target) == (None, "owner", "Vision")
    assert event.detail["slug"] == "vision" and event.detail["hosts"] == 1
    assert client.get(f"/teams/{team.slug}/").status_code == 404


def test_admin_cannot_rename_or_delete(client, team_roles, team):
    client.force_login(team_roles["admin"])
    assert client.post(f"/teams/{team.slug}/settings/", {"name": "Mine"}).status_code == 403
    assert client.post(f"/teams/{team.slug}/settings/delete",
                       {"confirm": "Vision"}).status_code == 403
    team.refresh_from_db()
    assert team.name == "Vision"


def test_outsider_cannot_see_the_settings(client, users, team):
    client.force_login(users["outsider"])
    assert client.get(f"/teams/{team.slug}/settings/").status_code == 404
    assert client.post(f"/teams/{team.slug}/settings/delete",
                       {"confirm": "Vision"}).status_code == 404
    assert Team.objects.filter(id=team.id).exists()


def test_settings_link_only_for_owners(client, team_roles, team):
    for role, shown in (("owner", True), ("admin", False)):
        client.force_login(team_roles[role])
        html = client.get(f"/teams/{team.slug}/members/").content.decode()
        assert (f'href="/teams/{team.slug}/settings/"' in html) is shown, role


def test_delete_team_domain_function_checks_the_name(team, users):
    with pytest.raises(membership.MembershipError):
        membership.delete_team(team, users["owner"], confirm="Visio")
    membership.delete_team(team, users["owner"], confirm="Vision")
    assert not Team.objects.exists() and not Membership.objects.exists()


# --- withdrawing invitations -----------------------------------------------------------------

def test_owner_withdraws_a_pending_invitation(client, users, team, mailoutbox,
                                              django_capture_on_commit_callbacks):
    with django_capture_on_commit_callbacks(execute=True):  # the mail task, after commit
        inv, _ = invitations.invite(team, users["owner"], "dana@example.com", "viewer")
    link = re.search(r"https?://\S+/invitations/\S+/", mailoutbox[-1].body)[0]
    client.force_login(users["owner"])
    page = client.get(f"/teams/{team.slug}/members/").content.decode()
    url = f"/teams/{team.slug}/members/invitations/{inv.id}/withdraw"
    assert f'action="{url}"' in page
    resp = client.post(url, follow=True)
    assert b"Invitation to dana@example.com withdrawn" in resp.content
    inv.refresh_from_db()
    assert inv.revoked_at is not None
    event = AuditEvent.objects.get(action="member.invitation_withdrawn")
    assert (event.actor_label, event.target, event.detail) == (
        "owner", "dana@example.com", {"role": "viewer"})
    # The link no longer works, and withdrawing twice records nothing more.
    with pytest.raises(invitations.InvitationError) as exc:
        invitations.lookup(link.rsplit("/", 2)[1])
    assert exc.value.code == "revoked"
    client.post(url)
    assert AuditEvent.objects.filter(action="member.invitation_withdrawn").count() == 1


def test_another_teams_invitation_cannot_be_withdrawn(client, users, team, other_team):
    theirs, _ = invitations.invite(other_team, users["outsider"], "x@example.com", "member")
    client.force_login(users["owner"])
    url = f"/teams/{team.slug}/members/invitations/{theirs.id}/withdraw"
    assert client.post(url).status_code == 404
    assert Invitation.objects.get(id=theirs.id).revoked_at is None


# --- workload changes are audited ------------------------------------------------------------

def test_workload_created_and_changed_on_the_page_are_audited(client, users, team, host):
    client.force_login(users["owner"])
    assert client.post(f"/teams/{team.slug}/workloads/new/",
                       {"name": "Ranker", "kind": "inference"}).status_code == 302
    assert client.post(f"/teams/{team.slug}/workloads/ranker/edit/",
                       {"name": "Ranker", "slug": "ranker", "kind": "batch"}).status_code == 302
    events = list(AuditEvent.objects.filter(team=team).order_by("id")
                  .values_list("action", "target", "actor_label"))
    assert events == [("workload.created", "ranker", "owner"),
                      ("workload.changed", "ranker", "owner")]


def test_invalid_workload_form_records_nothing(client, users, team):
    client.force_login(users["owner"])
    client.post(f"/teams/{team.slug}/workloads/new/", {"name": "x", "kind": "gaming"})
    assert not AuditEvent.objects.filter(action__startswith="workload.").exists()


def test_workload_created_through_the_api_is_audited(client, users, team):
    client.force_login(users["owner"])
    resp = client.post(f"/api/v1/teams/{team.slug}/workloads",
                       orjson.dumps({"name": "Ranker", "kind": "inference"}),
                       content_type="application/json")
    assert resp.status_code == 201, resp.content
    event = AuditEvent.objects.get(action="workload.created")
    assert (event.target, event.actor_label) == ("ranker", "owner")
