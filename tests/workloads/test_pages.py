"""Workload pages and the workloads API: who may read, who may edit, validation."""

from __future__ import annotations

import orjson
import pytest

from greenops.teams.models import Membership, Role
from greenops.workloads.models import Workload


@pytest.fixture
def viewer(users, team):
    from django.contrib.auth.models import User

    u = User.objects.create_user("viewer", "v@example.com", "pw")
    Membership.objects.create(team=team, user=u, role=Role.VIEWER)
    return u


def test_admin_registers_a_workload_linked_to_a_gpu(client, users, team, host):
    # Registering workloads needs the admin role ("workloads.manage" in the permission matrix).
    Membership.objects.filter(team=team, user=users["member"]).update(role=Role.ADMIN)
    h, _ = host
    gpu = h.gpus.get(index=1)
    client.force_login(users["member"])
    r = client.post(f"/teams/{team.slug}/workloads/new/",
                    {"name": "Image Ranker", "kind": "inference", "gpus": [gpu.id]})
    assert r.status_code == 302
    w = Workload.objects.get(team=team)
    assert w.slug == "image-ranker" and list(w.gpu_queryset()) == [gpu]
    page = client.get(f"/teams/{team.slug}/workloads/")
    assert b"Image Ranker" in page.content and b"GPU 1" in page.content
    r = client.post(f"/teams/{team.slug}/workloads/image-ranker/edit/",
                    {"name": "Image Ranker", "slug": "image-ranker", "kind": "batch",
                     "hosts": [h.id]})
    assert r.status_code == 302
    w.refresh_from_db()
    assert w.kind == "batch" and w.gpu_queryset().count() == 2


def test_invalid_form_stores_nothing(client, users, team, other_team):
    from tests.support.factories import make_host

    theirs, _ = make_host(other_team, "their-host")
    client.force_login(users["owner"])
    r = client.post(f"/teams/{team.slug}/workloads/new/",
                    {"name": "x", "kind": "inference", "hosts": [theirs.id]})
    assert r.status_code == 400
    r = client.post(f"/teams/{team.slug}/workloads/new/", {"name": "x", "kind": "gaming"})
    assert r.status_code == 400
    assert not Workload.objects.exists()


def test_viewer_reads_but_cannot_edit(client, viewer, team):
    Workload.objects.create(team=team, name="A", kind="inference")
    client.force_login(viewer)
    r = client.get(f"/teams/{team.slug}/workloads/")
    assert r.status_code == 200 and b"Register a workload" not in r.content
    assert client.get(f"/teams/{team.slug}/workloads/new/").status_code == 403
    assert client.post(f"/teams/{team.slug}/workloads/a/edit/", {"name": "B"}).status_code == 403
    assert Workload.objects.get().name == "A"


def test_outsider_gets_404_everywhere(client, users, team, other_team):
    Workload.objects.create(team=team, name="A", kind="inference")
    client.force_login(users["outsider"])
    for url in ("workloads/", "workloads/new/", "workloads/a/edit/"):
        assert client.get(f"/teams/{team.slug}/{url}").status_code == 404, url
    assert client.get(f"/api/v1/teams/{team.slug}/workloads").status_code == 404
    client.logout()
    assert client.get(f"/teams/{team.slug}/workloads/").status_code == 302


def test_empty_state_says_what_to_do(client, users, team):
    client.force_login(users["owner"])
    r = client.get(f"/teams/{team.slug}/workloads/")
    assert b"No workloads yet" in r.content and b"API token" in r.content


def _post_api(client, slug, doc):
    return client.post(f"/api/v1/teams/{slug}/workloads", orjson.dumps(doc),
                       content_type="application/json")


def test_api_registers_and_lists_workloads(client, users, team, host):
    h, _ = host
    client.force_login(users["owner"])
    r = _post_api(client, team.slug, {"name": "Ranker", "kind": "inference",
                                      "gpus": [h.gpus.get(index=0).uuid,
                                               {"host": "gpu-node-1", "index": 1}],
                                      "latency_critical": True})
    assert r.status_code == 201, r.content
    assert r.json()["slug"] == "ranker" and len(r.json()["gpus"]) == 2
    listed = client.get(f"/api/v1/teams/{team.slug}/workloads").json()
    assert [w["slug"] for w in listed] == ["ranker"] and listed[0]["latency_critical"] is True
    assert (listed[0]["served_model"], listed[0]["p99_target_ms"]) == ("", None)


def test_api_sets_the_served_model_and_p99_target_the_advisor_reads(client, users, team):
    client.force_login(users["owner"])
    r = _post_api(client, team.slug, {"name": "Chat", "kind": "inference",
                                      "served_model": "llama-3.1-8b-instruct",
                                      "p99_target_ms": 250})
    assert r.status_code == 201, r.content
    w = Workload.objects.get(slug="chat")
    assert (w.served_model, w.p99_target_ms) == ("llama-3.1-8b-instruct", 250.0)
    assert r.json()["p99_target_ms"] == 250.0


@pytest.mark.parametrize("doc,field", [
    ({"kind": "inference"}, "name"),
    ({"name": "x", "kind": "gaming"}, "kind"),
    ({"name": "x", "kind": "inference", "hosts": ["nope"]}, "hosts[0]"),
    ({"name": "x", "kind": "inference", "gpus": ["GPU-nope"]}, "gpus[0]"),
    ({"name": "x", "kind": "inference", "gpus": [{"host": "gpu-node-1", "index": 7}]},
     "gpus[0]"),
    ({"name": "x", "kind": "inference", "interruptible": "yes"}, "interruptible"),
    ({"name": "x", "kind": "inference", "owner": "me"}, "owner"),
    ({"name": "x", "kind": "inference", "p99_target_ms": "200"}, "p99_target_ms"),
    ({"name": "x", "kind": "inference", "p99_target_ms": True}, "p99_target_ms"),
    ({"name": "x", "kind": "inference", "p99_target_ms": 0}, "p99_target_ms"),
    ({"name": "x", "kind": "inference", "served_model": "m" * 201}, "served_model"),
])
def test_api_bad_input_names_the_field(client, users, team, host, doc, field):
    client.force_login(users["owner"])
    r = _post_api(client, team.slug, doc)
    assert r.status_code == 422, r.content
    assert r.json()["field"] == field
    assert not Workload.objects.exists()


def test_api_duplicate_slug_is_rejected(client, users, team):
    Workload.objects.create(team=team, name="Ranker", kind="inference")
    client.force_login(users["owner"])
    r = _post_api(client, team.slug, {"name": "Ranker", "kind": "batch"})
    assert r.status_code == 422 and r.json()["field"] == "slug"
    assert Workload.objects.count() == 1


def test_api_viewer_cannot_register(client, viewer, team):
    client.force_login(viewer)
    r = _post_api(client, team.slug, {"name": "x", "kind": "inference"})
    assert r.status_code == 403 and not Workload.objects.exists()
