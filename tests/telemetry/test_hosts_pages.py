"""The host list and the Add host / revoke / rotate / remove pages, as an admin uses them."""

from __future__ import annotations

import json
import re
from datetime import timedelta

from django.utils import timezone

from greenops.teams.models import AuditEvent
from greenops.telemetry.models import Host
from tests.support.factories import make_batch, make_host


def test_host_list_shows_status_agent_gpus_and_spool_lag(client, team_roles, team, host,
                                                         post_batch):
    h, token = host
    stale, _ = make_host(team, "gpu-node-2", gpus=1)
    Host.objects.filter(id=stale.id).update(last_seen=timezone.now() - timedelta(minutes=5),
                                            agent_version="0.0.9")
    assert post_batch(token, make_batch(spool={"depth": 3, "oldest_age_s": 27.0})).status_code \
        == 202
    client.force_login(team_roles["viewer"])
    html = client.get(f"/teams/{team.slug}/hosts/").content.decode()
    row1 = html.split('data-host="gpu-node-1"')[1].split("</tr>")[0]
    row2 = html.split('data-host="gpu-node-2"')[1].split("</tr>")[0]
    assert "status online" in row1 and "status offline" in row2
    assert "0.1.0" in row1 and "0.0.9" in row2
    assert "2 × NVIDIA A100-SXM4-40GB" in row1 and "1 × NVIDIA A100" in row2
    assert "3 batches, oldest 27 s" in row1
    assert "Rotate token" not in html and "Add host" not in html  # viewers only read

    api = client.get(f"/api/v1/teams/{team.slug}/hosts").json()
    by_name = {r["name"]: r for r in api}
    assert by_name["gpu-node-1"]["online"] is True and by_name["gpu-node-2"]["online"] is False
    assert by_name["gpu-node-1"]["spool_depth"] == 3
    assert by_name["gpu-node-1"]["spool_oldest_age_s"] == 27.0


def test_add_host_page_issues_a_working_single_use_command(client, team_roles, team):
    client.force_login(team_roles["admin"])
    form = client.get(f"/teams/{team.slug}/hosts/add/")
    assert b"Get install command" in form.content
    html = client.post(f"/teams/{team.slug}/hosts/add/").content.decode()
    command = re.search(r'<pre class="command" id="install-command">(.*?)</pre>', html, re.S)[1]
    command = command.replace("&quot;", '"')
    wheel = re.search(r'pip install -q "([^"]+)"', command)[1]
    assert wheel == "http://testserver/downloads/greenops_agent-0.1.0-py3-none-any.whl"
    server, token = re.search(r"enroll --server (\S+) --token (gen_\S+)", command).groups()
    assert server == "http://testserver"
    assert "ExecStart=/opt/greenops-agent/bin/greenops-agent run" in html
    assert client.get(wheel.removeprefix("http://testserver")).status_code == 200
    doc = {"token": token, "hostname": "from-page", "gpus": [{"index": 0, "name": "L4"}]}
    enroll = lambda: client.post("/api/v1/enroll", json.dumps(doc),  # noqa: E731
                                 content_type="application/json")
    assert enroll().status_code == 201
    assert enroll().json()["error"] == "token_used"
    actions = list(AuditEvent.objects.filter(team=team).values_list("action", flat=True))
    assert actions == ["host.enrolled", "host.enroll_token"]


def test_revoke_rotate_remove_from_the_page(client, team_roles, team, host, post_batch):
    h, token = host
    client.force_login(team_roles["admin"])
    resp = client.post(f"/teams/{team.slug}/hosts/{h.id}/rotate")
    new = re.search(r'token = "(gho_[^"]+)"', resp.content.decode())[1]
    assert post_batch(token, make_batch()).status_code == 401
    assert post_batch(new, make_batch()).status_code == 202

    resp = client.post(f"/teams/{team.slug}/hosts/{h.id}/revoke", follow=True)
    assert b"token revoked" in resp.content
    assert post_batch(new, make_batch()).status_code == 401
    row = resp.content.decode().split('data-host="gpu-node-1"')[1].split("</tr>")[0]
    assert "revoked" in row and "status offline" in row

    resp = client.post(f"/teams/{team.slug}/hosts/{h.id}/remove", follow=True)
    html = resp.content.decode()
    assert 'data-host="gpu-node-1"' not in html and "Removed hosts" in html
    # A removed host cannot be acted on again (404), and the audit log says who did what.
    assert client.post(f"/teams/{team.slug}/hosts/{h.id}/rotate").status_code == 404
    log = client.get(f"/teams/{team.slug}/audit/").content.decode()
    for label in ("Host token rotated", "Host token revoked", "Host removed"):
        assert label in log
    assert list(AuditEvent.objects.filter(team=team).values_list("actor_label", flat=True)) == [
        "admin"] * 3


def test_another_teams_host_is_404_even_for_an_admin(client, team_roles, team, other_team):
    theirs, _ = make_host(other_team, "their-node")
    client.force_login(team_roles["owner"])
    for verb in ("rotate", "revoke", "remove"):
        assert client.post(f"/teams/{team.slug}/hosts/{theirs.id}/{verb}").status_code == 404
    assert client.delete(f"/api/v1/teams/{team.slug}/hosts/{theirs.id}").status_code == 404
    theirs.refresh_from_db()
    assert theirs.removed_at is None and theirs.revoked_at is None


def test_removed_host_keeps_history_until_an_owner_deletes_it(client, users, team, host,
                                                              post_batch):
    from greenops.telemetry.models import Gpu, GpuHour, GpuMinute, GpuSample

    h, token = host
    other, other_token = make_host(team, name="keeper", gpus=1)
    assert post_batch(token, make_batch(n_per_gpu=4)).status_code == 202
    assert post_batch(other_token, make_batch(n_per_gpu=3, gpus=(0,))).status_code == 202
    client.force_login(users["owner"])
    client.post(f"/teams/{team.slug}/hosts/{h.id}/remove")
    assert GpuSample.objects.count() == 11  # removed, history kept
    page = client.get(f"/teams/{team.slug}/hosts/").content.decode()
    assert "Delete history" in page
    # A wrong confirmation deletes nothing.
    client.post(f"/teams/{team.slug}/hosts/{h.id}/delete", {"confirm": "nope"})
    assert Host.objects.filter(id=h.id).exists() and GpuSample.objects.count() == 11
    r = client.post(f"/teams/{team.slug}/hosts/{h.id}/delete", {"confirm": h.name})
    assert r.status_code == 302
    assert not Host.objects.filter(id=h.id).exists()
    keeper_gpu = Gpu.objects.get(host=other)
    assert set(GpuSample.objects.values_list("gpu_id", flat=True)) == {keeper_gpu.id}
    assert set(GpuMinute.objects.values_list("gpu_id", flat=True)) == {keeper_gpu.id}
    assert set(GpuHour.objects.values_list("gpu_id", flat=True)) == {keeper_gpu.id}
    event = AuditEvent.objects.get(action=AuditEvent.Action.HOST_DELETED)
    assert event.target == h.name


# --- audit of issue 4: install hints, the configured TTL, no names inside JavaScript --------

def test_add_host_page_says_what_the_host_needs_and_the_real_ttl(client, team_roles, team,
                                                                 settings):
    settings.ENROLL_TOKEN_TTL_MINUTES = 15
    client.force_login(team_roles["admin"])
    form = client.get(f"/teams/{team.slug}/hosts/add/").content.decode()
    assert "valid for 15 minutes" in form and "one hour" not in form
    before = timezone.now()
    html = client.post(f"/teams/{team.slug}/hosts/add/").content.decode()
    hint = html.split('id="install-needs"')[1].split("</p>")[0]
    assert "Python 3.11" in hint and "python3-venv" in hint
    assert "15 minutes" in html
    from greenops.telemetry.models import EnrollmentToken

    ttl = EnrollmentToken.objects.get().expires_at - before
    assert timedelta(minutes=14, seconds=59) < ttl <= timedelta(minutes=15, seconds=5)


def _onsubmits(html: str) -> list[str]:
    return re.findall(r'onsubmit="([^"]*)"', html)


def test_host_names_are_never_interpolated_into_javascript(client, team_roles, team):
    evil = "n');alert(1);//"
    make_host(team, evil)
    client.force_login(team_roles["admin"])
    html = client.get(f"/teams/{team.slug}/hosts/").content.decode()
    handlers = _onsubmits(html)
    assert handlers and set(handlers) == {"return confirm(this.dataset.confirm)"}
    assert 'data-confirm="Remove n&#x27;);alert(1);//? Its history stays in reports."' in html


def test_member_names_are_never_interpolated_into_javascript(client, users, team):
    from django.contrib.auth.models import User

    from greenops.teams.models import Membership

    evil = User.objects.create_user("o'brien", "ob@example.com", "pw")
    Membership.objects.create(team=team, user=evil, role="viewer")
    client.force_login(users["owner"])
    html = client.get(f"/teams/{team.slug}/members/").content.decode()
    handlers = _onsubmits(html)
    assert handlers and set(handlers) == {"return confirm(this.dataset.confirm)"}
    assert "data-confirm=\"Remove o&#x27;brien from Vision?\"" in html
