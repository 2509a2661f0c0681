"""Training jobs: start/stop API, access, validation, and hand-computed accounting."""

from __future__ import annotations

import datetime as dt

import orjson
import pytest

from greenops.kpis import job_accounting
from greenops.teams.models import ApiToken
from greenops.workloads import jobs
from greenops.workloads.models import TrainingJob, Workload
from tests.support.kpis import H, build_scenario, stand_in_factors


@pytest.fixture
def trainer(team, host):
    h, _ = host
    w = Workload.objects.create(team=team, name="LLM finetune", kind="training")
    w.hosts.add(h)
    return w


@pytest.fixture
def token(team):
    return ApiToken.issue(team, "trainer")[1]


def api(client, token, path, doc=None):
    return client.post(path, orjson.dumps(doc) if doc is not None else b"",
                       content_type="application/json", HTTP_AUTHORIZATION=f"Bearer {token}")


@pytest.fixture
def scenario(team):
    return build_scenario(team)


def test_job_accounting_hand_computed(scenario):
    # Job on A0 and B0 from 10:15 to 10:45 (see test_kpis_measure for the scenario):
    # GPU: A0 30 min x 30,000 J + B0 15 min x 24,000 J = 1,260,000 J
    # CPU/RAM: A 432,000 x 1/2 x 0.5 h = 108,000 J; B 180,000 x 0.5 h = 90,000 J
    # A: 1,008,000 J = 0.28 kWh x 1.5 = 0.42 kWh x 400 = 168 g
    # B:   450,000 J = 0.125 kWh x 1.1 = 0.1375 kWh x 100 = 13.75 g
    # Cost (the Costs page's model: the hosts' hours in the window x the job's share of each):
    #   A ran, 0.5 h x $8 x 1/2 GPUs = $2; B ran, 0.5 h x $2 x 1/1 = $1 (GPU-minutes gave $2.50)
    w = scenario["workload"]
    job = TrainingJob.objects.create(team=w.team, workload=w, name="run 1",
                                     started_at=H + dt.timedelta(minutes=15),
                                     stopped_at=H + dt.timedelta(minutes=45))
    job.gpus.set([scenario["a0"], scenario["b0"]])
    job_accounting.account(job, stand_in_factors())
    job.refresh_from_db()
    assert job.duration_s() == 1800
    assert job.gpu_energy_j == pytest.approx(1_260_000)
    assert job.cpu_ram_energy_j == pytest.approx(198_000)
    assert job.facility_energy_j == pytest.approx((0.42 + 0.1375) * 3_600_000)
    assert job.co2e_kg == pytest.approx(0.18175)
    assert job.cost_usd == pytest.approx(3.0)
    assert job.gpu_hours == pytest.approx(0.75)
    assert "test table: A" in job.intensity_source and "test table: B" in job.intensity_source
    s = jobs.summary(job)
    assert s["energy_kwh"] == pytest.approx(1_458_000 / 3_600_000)
    assert s["time_to_train_s"] == 1800


def test_start_and_stop_through_the_api(client, token, trainer, host):
    r = api(client, token, "/api/v1/training-jobs",
            {"workload": "llm-finetune", "name": "run 7", "host": "gpu-node-1", "gpus": [1],
             "external_id": "run-7"})
    assert r.status_code == 201, r.content
    job = r.json()
    assert job["running"] and [g["index"] for g in job["gpus"]] == [1]
    # A retried start with the same external id is the same job.
    again = api(client, token, "/api/v1/training-jobs",
                {"workload": "llm-finetune", "name": "run 7", "external_id": "run-7"})
    assert again.json()["id"] == job["id"] and TrainingJob.objects.count() == 1
    r = api(client, token, f"/api/v1/training-jobs/{job['id']}/stop")
    assert r.status_code == 200
    stopped = r.json()
    assert not stopped["running"] and stopped["accounted_at"] is not None
    # No telemetry from its GPUs while it ran: unknown, never "0 kWh, $0".
    assert stopped["gpu_energy_kwh"] is None and stopped["cost_usd"] is None
    assert stopped["co2e_kg"] is None
    assert stopped["cost_source"] == "no telemetry from the job's GPUs while it ran"
    # Stopping twice keeps the first stop time.
    r2 = api(client, token, f"/api/v1/training-jobs/{job['id']}/stop")
    assert r2.json()["stopped_at"] == stopped["stopped_at"]


def test_job_without_gpus_named_uses_the_workloads(client, token, trainer):
    r = api(client, token, "/api/v1/training-jobs", {"workload": "llm-finetune", "name": "x"})
    assert [g["index"] for g in r.json()["gpus"]] == [0, 1]


def test_job_of_a_workload_without_capacity_is_refused(client, token, trainer):
    from greenops.workloads.models import Workload

    Workload.objects.create(team=trainer.team, name="Unplaced", kind="training")
    r = api(client, token, "/api/v1/training-jobs", {"workload": "unplaced", "name": "x"})
    assert r.status_code == 422 and r.json()["field"] == "gpus"
    assert not TrainingJob.objects.exists()


BAD_START = [
    ({"name": "x"}, "workload"),
    ({"workload": "nope", "name": "x"}, "workload"),
    ({"workload": "llm-finetune"}, "name"),
    ({"workload": "llm-finetune", "name": "   "}, "name"),
    ({"workload": "llm-finetune", "name": "x", "gpus": [0]}, "host"),
    ({"workload": "llm-finetune", "name": "x", "host": "gpu-node-1", "gpus": [9]}, "gpus[0]"),
    ({"workload": "llm-finetune", "name": "x", "gpus": ["GPU-unknown"]}, "gpus[0]"),
    ({"workload": "llm-finetune", "name": "x", "gpus": []}, "gpus"),
    ({"workload": "llm-finetune", "name": "x", "host": "elsewhere"}, "host"),
    ({"workload": "llm-finetune", "name": "x", "started_at": 4e9}, "started_at"),
    ({"workload": "llm-finetune", "name": "x", "started_at": -9.3e35}, "started_at"),
    ({"workload": "llm-finetune", "name": "x", "colour": 1}, "colour"),
]


@pytest.mark.parametrize("doc,field", BAD_START)
def test_bad_start_names_the_field_and_stores_nothing(client, token, trainer, doc, field):
    r = api(client, token, "/api/v1/training-jobs", doc)
    assert r.status_code == 422, r.content
    assert r.json()["field"] == field
    assert not TrainingJob.objects.exists()


def test_stop_before_start_is_rejected(client, token, trainer):
    job = api(client, token, "/api/v1/training-jobs",
              {"workload": "llm-finetune", "name": "x"}).json()
    for stopped_at in (1.0, -9.3e35):  # the second was an OverflowError, a 500 (schemathesis)
        r = api(client, token, f"/api/v1/training-jobs/{job['id']}/stop",
                {"stopped_at": stopped_at})
        assert r.status_code == 422 and r.json()["field"] == "stopped_at"
    assert TrainingJob.objects.get().stopped_at is None


def test_other_teams_cannot_see_or_stop_a_job(client, token, trainer, other_team):
    job = api(client, token, "/api/v1/training-jobs",
              {"workload": "llm-finetune", "name": "x"}).json()
    theirs = ApiToken.issue(other_team, "theirs")[1]
    assert api(client, theirs, f"/api/v1/training-jobs/{job['id']}/stop").status_code == 404
    r = client.get(f"/api/v1/training-jobs/{job['id']}", HTTP_AUTHORIZATION=f"Bearer {theirs}")
    assert r.status_code == 404 and r.json()["error"] == "not_found"
    assert TrainingJob.objects.get().stopped_at is None
    assert api(client, "", "/api/v1/training-jobs", {}).status_code == 401
