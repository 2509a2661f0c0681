"""A workload's GPUs as seen in the hosts' process snapshots, beside the configured ones.

The GpuProcess rows are written by hand the way greenops/telemetry/host_samples.py stores the
agent's snapshot: NVML compute processes (pid, the name from /proc, usedGpuMemory in MiB) and
dcgm-exporter's pods (namespace/pod/container, no memory). The expected lists and memory sums
are worked out by hand in the comments.
"""

from __future__ import annotations

import datetime as dt
import re

import pytest
from django.utils import timezone

from greenops.teams.models import AuditEvent, Membership, Role
from greenops.telemetry.models import GpuProcess, HostSample
from greenops.workloads.models import Workload
from greenops.workloads.seen import seen_gpus
from tests.support.factories import make_host

pytestmark = pytest.mark.django_db


@pytest.fixture
def fleet(team, other_team):
    now = timezone.now()
    fresh = now - dt.timedelta(seconds=30)
    a, _ = make_host(team, "node-a")
    b, _ = make_host(team, "node-b")
    old, _ = make_host(team, "node-old", gpus=1)
    theirs, _ = make_host(other_team, "their-node")
    a0, a1 = a.gpus.get(index=0), a.gpus.get(index=1)
    b0, b1 = b.gpus.get(index=0), b.gpus.get(index=1)
    old0 = old.gpus.get()
    t0 = theirs.gpus.get(index=0)

    def proc(gpu, **kw):
        GpuProcess.objects.create(host=gpu.host, gpu=gpu, seen_at=kw.pop("at", fresh), **kw)

    # node-a GPU 0: Triton (two server processes, one listed by full path) + an unrelated
    # notebook; node-a GPU 1: only the notebook kind.
    proc(a0, pid=4242, name="tritonserver", used_memory_mib=20480.0)
    proc(a0, pid=4243, name="/opt/tritonserver/bin/tritonserver", used_memory_mib=512.0)
    proc(a0, pid=99, name="python3", used_memory_mib=1024.0)
    proc(a1, pid=100, name="python3", used_memory_mib=3000.0)
    # node-b (dcgm-exporter): the vLLM pod on GPU 0; another model's pod and a same-named pod
    # in another namespace on GPU 1 -- neither is this workload.
    proc(b0, pod="vllm-llama-7b-5d9f8c7b6-x2kqp", namespace="inference", container="vllm")
    proc(b1, pod="vllm-mistral-7b-7c4d9-abcde", namespace="inference", container="vllm")
    proc(b1, pod="vllm-llama-7b-66f-zzz", namespace="default", container="vllm")
    # node-old stopped reporting 30 min ago with no process in its last snapshot.
    HostSample.objects.create(host=old, ts=now - dt.timedelta(minutes=30), interval_s=15.0)
    # Another team's host runs Triton too: never this team's business.
    proc(t0, pid=7, name="tritonserver", used_memory_mib=9999.0)

    w = Workload.objects.create(team=team, name="Chat", kind="inference",
                                match_process="tritonserver", match_namespace="inference",
                                match_pod_prefix="vllm-llama-7b-")
    w.gpus.add(a0, a1, old0)
    return {"w": w, "a0": a0, "a1": a1, "b0": b0, "b1": b1, "old0": old0, "t0": t0,
            "fresh": fresh}


def ids(rows):
    return [r.gpu.id for r in rows]


def test_three_lists_memory_and_stale_host(fleet):
    s = seen_gpus(fleet["w"])
    assert ids(s.ok) == [fleet["a0"].id]
    # the two tritonserver processes, not the notebook: 20480 + 512 MiB
    assert s.ok[0].memory_mib == 20992.0
    assert [p.pid for p in s.ok[0].processes] == [4242, 4243]
    assert ids(s.not_configured) == [fleet["b0"].id]
    assert s.not_configured[0].memory_mib is None  # pods carry no memory: unknown, not 0
    assert ids(s.not_seen) == [fleet["a1"].id]
    assert s.not_seen[0].report.snapshot_at == fleet["fresh"]
    # node-old: last heard 30 min ago (> 5 min): unknown, not "nothing running"
    assert ids(s.unknown) == [fleet["old0"].id] and s.unknown[0].report.stale


def _section(html: str, table_id: str) -> str:
    m = re.search(rf'id="{table_id}".*?(</table>|</p>)', html, re.S)
    assert m, table_id
    return m.group(0)


def test_page_lists(client, users, fleet, team):
    client.force_login(users["owner"])
    r = client.get(f"/teams/{team.slug}/workloads/chat/gpus/")
    assert r.status_code == 200
    html = r.content.decode()
    ok, extra = _section(html, "gpus-ok"), _section(html, "gpus-extra")
    missing = _section(html, "gpus-missing")
    assert "node-a · GPU 0" in ok and "20,992 MiB" in ok and "python3" not in ok
    assert "node-b · GPU 0" in extra and "inference/vllm-llama-7b-5d9f8c7b6-x2kqp" in extra
    assert "Add to this workload" in extra
    assert "node-a · GPU 1" in missing and fleet["fresh"].strftime("%Y-%m-%d %H:%M") in missing
    assert "node-old · GPU 0" in missing and "stale: host stopped reporting" in missing
    assert "their-node" not in html and "9999" not in html


def test_rule_matching_only_another_teams_host_shows_nothing(client, users, fleet, team):
    w = Workload.objects.create(team=team, name="Triton only", kind="inference",
                                match_process="tritonserver")
    GpuProcess.objects.filter(host__team=team).delete()
    s = seen_gpus(w)
    assert (s.ok, s.not_configured, s.not_seen, s.unknown) == ([], [], [], [])
    client.force_login(users["owner"])
    html = client.get(f"/teams/{team.slug}/workloads/triton-only/gpus/").content.decode()
    assert "their-node" not in html and "None: every GPU it is seen on" in html


def test_access(client, users, fleet, team):
    path = f"/teams/{team.slug}/workloads/chat/gpus/"
    client.force_login(users["outsider"])
    assert client.get(path).status_code == 404  # not even its existence
    client.force_login(users["member"])  # teammate: reads, no add button
    r = client.get(path)
    assert r.status_code == 200 and b"Add to this workload" not in r.content
    assert b"an admin can add it" in r.content
    client.force_login(users["owner"])
    assert b"Add to this workload" in client.get(path).content


def test_add_adds_exactly_that_gpu_with_audit(client, users, fleet, team):
    w, b0 = fleet["w"], fleet["b0"]
    add = f"/teams/{team.slug}/workloads/chat/gpus/add/"
    before = set(w.gpu_queryset().values_list("id", flat=True))
    client.force_login(users["outsider"])
    assert client.post(add, {"gpu": b0.id}).status_code == 404
    client.force_login(users["member"])  # "workloads.manage" is admin and up
    assert client.post(add, {"gpu": b0.id}).status_code == 403
    assert set(w.gpu_queryset().values_list("id", flat=True)) == before
    assert not AuditEvent.objects.filter(action=AuditEvent.Action.WORKLOAD_CHANGED).exists()

    client.force_login(users["owner"])
    bad = client.post(add, {"gpu": fleet["t0"].id})  # another team's GPU
    assert bad.status_code == 400 and b"gpu" in bad.content
    assert client.post(add, {"gpu": "x"}).status_code == 400
    r = client.post(add, {"gpu": b0.id})
    assert r.status_code == 302
    assert set(w.gpu_queryset().values_list("id", flat=True)) == before | {b0.id}
    assert not w.hosts.exists()  # the GPU, not its whole host
    ev = AuditEvent.objects.get(action=AuditEvent.Action.WORKLOAD_CHANGED)
    assert ev.target == "chat" and ev.actor == users["owner"]
    assert ev.detail["gpu_added"] == b0.uuid and ev.detail["host"] == "node-b"
    client.post(add, {"gpu": b0.id})  # a second click changes and records nothing
    assert AuditEvent.objects.filter(action=AuditEvent.Action.WORKLOAD_CHANGED).count() == 1
    assert ids(seen_gpus(w).ok) == [fleet["a0"].id, b0.id]


def test_edit_form_rules_validated_and_audited(client, users, team):
    Membership.objects.filter(team=team, user=users["member"]).update(role=Role.ADMIN)
    Workload.objects.create(team=team, name="Chat", kind="inference")
    client.force_login(users["member"])
    url = f"/teams/{team.slug}/workloads/chat/edit/"
    base = {"name": "Chat", "slug": "chat", "kind": "inference"}
    for field, value, extra in [("match_pod_prefix", "vllm-", {}),  # no namespace
                                ("match_process", "*", {}),
                                ("match_process", "python 3", {}),
                                ("match_namespace", "Inference", {}),
                                ("match_pod_prefix", "vLLM_", {"match_namespace": "inference"})]:
        r = client.post(url, {**base, field: value, **extra})
        assert r.status_code == 400, (field, value)
        assert field in r.context["form"].errors, (field, r.context["form"].errors)
    assert Workload.objects.get().match_process == ""  # nothing stored half-way
    assert not AuditEvent.objects.exists()
    r = client.post(url, {**base, "match_process": "python3*", "match_namespace": "inference",
                          "match_pod_prefix": "vllm-llama-7b-"})
    assert r.status_code == 302
    w = Workload.objects.get()
    assert (w.match_process, w.match_namespace, w.match_pod_prefix) == (
        "python3*", "inference", "vllm-llama-7b-")
    assert w.matches("python3.11", "", "") and not w.matches("tritonserver", "", "")
    ev = AuditEvent.objects.get(action=AuditEvent.Action.WORKLOAD_CHANGED)
    assert ev.detail["match_process"] == "python3*"


@pytest.mark.browser
@pytest.mark.django_db(transaction=True)
def test_browser_section_renders_and_add_works(live_server, page, users, team, fleet):  # noqa: F811
    """Chromium: the workload page links to its GPUs; the three lists render at desktop and
    phone widths (screenshots in /work/notes/shots when that folder exists); one click adds the
    seen GPU, which then moves to 'configured and seen'."""
    from pathlib import Path

    from tests.support.browser import log_in

    shots = Path("/work/notes/shots")
    log_in(page, live_server.url, "owner", "pw-owner")
    page.goto(f"{live_server.url}/teams/{team.slug}/kpis/workloads/chat/")
    page.locator("#gpus-link").click()
    for width in (1440, 390):
        page.set_viewport_size({"width": width, "height": 900})
        page.reload()
        assert "20,992 MiB" in page.locator("#gpus-ok").inner_text()
        assert "vllm-llama-7b-5d9f8c7b6-x2kqp" in page.locator("#gpus-extra").inner_text()
        assert "stale: host stopped reporting" in page.locator("#gpus-missing").inner_text()
        if shots.is_dir():
            page.screenshot(path=str(shots / f"workload-procs-{width}.png"), full_page=True)
    page.set_viewport_size({"width": 1440, "height": 900})
    page.locator("#gpus-extra").get_by_role("button", name="Add to this workload").click()
    page.locator("#gpus-ok").get_by_text("node-b · GPU 0").wait_for()
    assert "None: every GPU it is seen on is configured" in page.locator("#gpus-extra").inner_text()
    assert fleet["b0"] in fleet["w"].gpus.all()


def test_api_create_names_the_bad_rule_field(client, users, team):
    client.force_login(users["owner"])
    url = f"/api/v1/teams/{team.slug}/workloads"
    r = client.post(url, {"name": "Chat", "kind": "inference", "match_pod_prefix": "vllm-"},
                    content_type="application/json")
    assert r.status_code in (400, 422) and "match_pod_prefix" in r.content.decode()
    assert not Workload.objects.exists()
    r = client.post(url, {"name": "Chat", "kind": "inference", "match_namespace": "inference",
                          "match_pod_prefix": "vllm-llama-7b-"},
                    content_type="application/json")
    assert r.status_code == 201, r.content
    assert r.json()["match_namespace"] == "inference"
    assert r.json()["match_pod_prefix"] == "vllm-llama-7b-"
