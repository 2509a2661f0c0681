"""Enrollment tokens, POST /api/v1/enroll, and the host token's lifecycle (domain + HTTP)."""

from __future__ import annotations

import io
import json
import time
import zipfile
from datetime import timedelta

import pytest
from django.utils import timezone

from greenops.teams.models import AuditEvent
from greenops.telemetry import enrollment
from greenops.telemetry.models import EnrollmentToken, Gpu, GpuSample, Host
from greenops.tokens import hash_token
from tests.support.factories import make_batch

GPUS = [{"index": 0, "uuid": "GPU-aaaa", "name": "NVIDIA H100 80GB HBM3", "power_limit_w": 700.0,
         "memory_total_mib": 81559},
        {"index": 1, "uuid": "GPU-bbbb", "name": "NVIDIA H100 80GB HBM3", "power_limit_w": 700.0,
         "memory_total_mib": 81559}]


def enroll_doc(token: str, **over) -> dict:
    doc = {"token": token, "hostname": "gpu-a1", "agent_version": "0.1.0", "gpus": GPUS,
           "facts": {"cpu_model": "AMD EPYC 7R13", "ram_total_mib": 1_048_576,
                     "instance_type": "p5.48xlarge", "region": "us-east-1", "provider": "aws",
                     "facts_source": "aws-imds"}}
    doc.update(over)
    return doc


def post_enroll(client, doc):
    return client.post("/api/v1/enroll", json.dumps(doc), content_type="application/json")


@pytest.fixture
def enroll_token(team, users):
    _row, token = enrollment.issue_enrollment_token(team, users["owner"])
    return token


def test_enrollment_registers_host_gpus_and_facts(client, team, enroll_token):
    resp = post_enroll(client, enroll_doc(enroll_token))
    assert resp.status_code == 201, resp.content
    body = resp.json()
    assert body["host"] == "gpu-a1" and body["team"] == team.slug and body["gpus"] == 2
    host = Host.objects.get(id=body["host_id"])
    # Only the hash of the long-lived token is kept.
    assert host.token_hash == hash_token(body["token"]) and body["token"].startswith("gho_")
    assert body["token"] not in json.dumps(list(Host.objects.values()), default=str)
    assert (host.cpu_model, host.ram_total_mib, host.instance_type, host.region,
            host.facts_source) == ("AMD EPYC 7R13", 1_048_576, "p5.48xlarge", "us-east-1",
                                   "aws-imds")
    assert list(host.gpus.values_list("index", "uuid", "power_limit_w")) == [
        (0, "GPU-aaaa", 700.0), (1, "GPU-bbbb", 700.0)]
    assert EnrollmentToken.objects.get().host_id == host.id
    assert host.last_seen is None and not host.is_online()  # online once the agent runs
    assert AuditEvent.objects.filter(team=team, action="host.enrolled", target="gpu-a1").exists()
    # The new token works for ingest at once.
    who = client.get("/api/v1/agent/whoami", HTTP_AUTHORIZATION=f"Bearer {body['token']}")
    # Just enrolled: the agent has sent nothing yet, so nothing is pending and no batch came.
    assert who.json() == {"host": "gpu-a1", "team": team.slug, "gpus": 2, "silent_s": None,
                          "pending_batches": 0, "data_lag_s": None}


def test_enrollment_token_used_twice_is_rejected(client, enroll_token):
    assert post_enroll(client, enroll_doc(enroll_token)).status_code == 201
    resp = post_enroll(client, enroll_doc(enroll_token, hostname="gpu-a2"))
    assert resp.status_code == 401
    assert resp.json()["error"] == "token_used" and resp.json()["field"] == "token"
    assert Host.objects.count() == 1


def test_expired_enrollment_token_is_rejected(client, team, users):
    _row, token = enrollment.issue_enrollment_token(
        team, users["owner"],
        now=timezone.now() - enrollment.enroll_token_ttl() - timedelta(seconds=1))
    resp = post_enroll(client, enroll_doc(token))
    assert resp.status_code == 401 and resp.json()["error"] == "token_expired"
    assert Host.objects.count() == 0


def test_unknown_and_malformed_tokens(client, db):
    assert post_enroll(client, enroll_doc("gen_nope")).json()["error"] == "invalid_token"
    assert post_enroll(client, enroll_doc("gho_host_token")).status_code == 401
    assert post_enroll(client, enroll_doc(None)).status_code == 401


@pytest.mark.parametrize("over,field", [
    ({"gpus": []}, "gpus"),
    ({"gpus": [{"index": -1}]}, "gpus[0].index"),
    ({"hostname": ""}, "hostname"),
    ({"facts": {"ram_total_mib": "lots"}}, "facts.ram_total_mib"),
    ({"facts": {"region": 5}}, "facts.region"),
])
def test_bad_request_names_the_field_and_does_not_burn_the_token(client, enroll_token, over,
                                                                   field):
    resp = post_enroll(client, enroll_doc(enroll_token, **over))
    assert resp.status_code == 422 and resp.json()["field"] == field, resp.content
    assert Host.objects.count() == 0 and Gpu.objects.count() == 0
    assert EnrollmentToken.objects.get().used_at is None
    assert post_enroll(client, enroll_doc(enroll_token)).status_code == 201  # still usable


def test_reenrolling_the_same_hostname_gets_a_new_name(client, team, users):
    for _ in range(2):
        _r, token = enrollment.issue_enrollment_token(team, users["owner"])
        assert post_enroll(client, enroll_doc(token)).status_code == 201
    assert sorted(Host.objects.values_list("name", flat=True)) == ["gpu-a1", "gpu-a1-2"]


def test_revoked_token_is_rejected(client, team, users, host, post_batch):
    h, token = host
    assert post_batch(token, make_batch()).status_code == 202
    enrollment.revoke(h, users["owner"])
    resp = post_batch(token, make_batch())
    assert resp.status_code == 401 and resp.json()["field"] == "Authorization"
    assert client.get("/api/v1/agent/whoami",
                      HTTP_AUTHORIZATION=f"Bearer {token}").status_code == 401
    assert AuditEvent.objects.filter(action="host.revoked", target=h.name).count() == 1


def test_rotate_replaces_the_token(team, users, host, post_batch):
    h, old = host
    new = enrollment.rotate(h, users["owner"])
    assert new != old
    assert post_batch(old, make_batch()).status_code == 401
    assert post_batch(new, make_batch()).status_code == 202


def test_remove_keeps_history_and_disables_the_token(team, users, host, post_batch):
    h, token = host
    assert post_batch(token, make_batch(n_per_gpu=3)).status_code == 202
    enrollment.remove(h, users["owner"])
    h.refresh_from_db()
    assert h.removed_at is not None
    assert GpuSample.objects.filter(gpu__host=h).count() == 6  # 3 samples x 2 GPUs kept
    assert post_batch(token, make_batch()).status_code == 401


def test_batch_spool_report_is_stored_for_the_host_list(host, post_batch):
    h, token = host
    assert post_batch(token, make_batch(spool={"depth": 7, "oldest_age_s": 42.5})).status_code \
        == 202
    h.refresh_from_db()
    assert (h.spool_depth, h.spool_oldest_age_s) == (7, 42.5)
    assert h.spool_reported_at is not None


@pytest.mark.parametrize("spool,field", [
    ({"depth": -1}, "spool.depth"), ({"depth": 1.5}, "spool.depth"), ("x", "spool"),
    ({"depth": 1, "oldest_age_s": -3}, "spool.oldest_age_s"),
])
def test_bad_spool_report_is_422_and_stores_nothing(host, post_batch, spool, field):
    h, token = host
    resp = post_batch(token, make_batch(spool=spool))
    assert resp.status_code == 422 and resp.json()["field"] == field
    assert GpuSample.objects.count() == 0


def test_server_time(client):
    before = time.time()
    doc = client.get("/api/v1/time").json()
    assert before <= doc["time"] <= time.time()


def test_agent_wheel_is_installable_shape(client):
    from greenops.telemetry.agent_dist import agent_wheel

    wheel = agent_wheel()
    assert wheel.filename == "greenops_agent-0.1.0-py3-none-any.whl"
    resp = client.get(f"/downloads/{wheel.filename}")
    assert resp.status_code == 200 and resp["X-Content-SHA256"] == wheel.sha256
    zf = zipfile.ZipFile(io.BytesIO(resp.content))
    names = set(zf.namelist())
    assert {"collectors/cli.py", "collectors/enroll.py",
            "greenops_agent-0.1.0.dist-info/RECORD"} <= names
    entry = zf.read("greenops_agent-0.1.0.dist-info/entry_points.txt").decode()
    assert "greenops-agent = collectors.cli:main" in entry
    metadata = zf.read("greenops_agent-0.1.0.dist-info/METADATA").decode()
    assert "Requires-Dist: nvidia-ml-py>=12\n" in metadata
    assert 'Requires-Dist: codecarbon>=3; extra == "codecarbon"' in metadata
    assert client.get("/downloads/greenops_agent-9.9.9-py3-none-any.whl").status_code == 404
    assert "ExecStart=/opt/greenops-agent/bin/greenops-agent run" in client.get(
        "/downloads/greenops-agent.service").content.decode()


# --- audit of issue 4: every stored string is checked against its column -------------------

@pytest.mark.parametrize("over,field", [
    ({"agent_version": "0.1.0-" + "x" * 27}, "agent_version"),  # 33 > Host.agent_version's 32
    ({"agent_version": 7}, "agent_version"),
    ({"hostname": "h" * 256}, "hostname"),
    ({"gpus": [{"index": 0, "name": "n" * 129}]}, "gpus[0].name"),
    ({"facts": {"country": "USAX"}}, "facts.country"),
])
def test_too_long_strings_are_422_not_500(client, enroll_token, over, field):
    resp = post_enroll(client, enroll_doc(enroll_token, **over))
    assert resp.status_code == 422, resp.content
    assert resp.json()["field"] == field
    assert Host.objects.count() == 0 and EnrollmentToken.objects.get().used_at is None


def test_agent_version_of_exactly_32_characters_is_stored(client, enroll_token):
    version = "1." + "2" * 30
    assert len(version) == 32
    resp = post_enroll(client, enroll_doc(enroll_token, agent_version=version))
    assert resp.status_code == 201, resp.content
    assert Host.objects.get().agent_version == version


def test_inventory_with_a_too_long_agent_version_is_422(client, host):
    h, token = host
    doc = {"agent_version": "9" * 33, "gpus": [{"index": 0, "name": "L4"}]}
    resp = client.post("/api/v1/inventory", json.dumps(doc), content_type="application/json",
                       HTTP_AUTHORIZATION=f"Bearer {token}")
    assert resp.status_code == 422, resp.content
    assert resp.json()["field"] == "agent_version"
    h.refresh_from_db()
    assert h.agent_version == "" and h.gpus.get(index=0).name == "NVIDIA A100-SXM4-40GB"
