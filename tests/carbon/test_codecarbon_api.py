"""The codecarbon client against /api/codecarbon: payloads exactly as the client builds them.

Payloads are made with codecarbon's own schema dataclasses (codecarbon/core/schemas.py, loaded
from the installed package by path so codecarbon's __init__ does not run in the test process)
and serialised with dataclasses.asdict, as ApiClient does. One test drives the real ApiClient in
a subprocess against a live server.
"""

from __future__ import annotations

import dataclasses
import json
import os
import subprocess
import sys
import uuid

import pytest

from greenops.carbon.models import Emission, Experiment, Run
from greenops.teams.models import ApiToken
from tests.support.carbon import (
    BASE,
    EXPERIMENT,
    emission_payload,
    run_payload,
    schemas,
)

# codecarbon 2.8's EmissionCreate has no utilisation fields and no wue.
V2_EMISSION_KEYS = {"timestamp", "run_id", "duration", "emissions_sum", "emissions_rate",
                    "cpu_power", "gpu_power", "ram_power", "cpu_energy", "gpu_energy",
                    "ram_energy", "energy_consumed"}


@pytest.fixture
def token(team):
    return ApiToken.issue(team, "codecarbon")[1]


@pytest.fixture
def other_token(other_team):
    return ApiToken.issue(other_team, "theirs")[1]


def post(client, path: str, payload: dict, token: str | None):
    headers = {"HTTP_X_API_TOKEN": token} if token else {}
    return client.post(BASE + path, json.dumps(payload), content_type="application/json",
                       **headers)


@pytest.mark.django_db
def test_run_then_delta_emissions_sum_to_the_run(client, team, token):
    r = post(client, "/runs", run_payload(), token)
    assert r.status_code == 201, r.content
    run_id = r.json()["id"]
    first = emission_payload(run_id, "2026-11-30T10:01:00.000000+01:00")
    second = emission_payload(run_id, "2026-11-30T10:02:00.000000+01:00", duration=60,
                              cpu_energy=0.0009, gpu_energy=0.006, ram_energy=0.0003,
                              energy_consumed=0.0072, emissions_sum=0.018)
    assert post(client, "/emissions", first, token).status_code == 201
    assert post(client, "/emissions", second, token).status_code == 201
    # A resend of the same row (same timestamp) is not counted twice.
    assert post(client, "/emissions", second, token).status_code == 201

    run = Run.objects.get(id=run_id)
    assert (run.team, run.source, run.region, run.provider) == (team, "client", "virginia", "aws")
    assert run.started_at.isoformat() == "2026-11-30T09:00:00.123456+00:00"
    assert run.experiment.external_id == uuid.UUID(EXPERIMENT)
    assert run.ram_total_size_gb == 251.5
    from greenops.carbon.runs import runs_with_totals

    totals = runs_with_totals(team).get(id=run_id)
    # Deltas add up: 0.0007+0.0009 CPU, 0.004+0.006 GPU, 0.0003+0.0003 RAM kWh; 120 s.
    assert totals.cpu_energy_kwh == pytest.approx(0.0016)
    assert totals.gpu_energy_kwh == pytest.approx(0.010)
    assert totals.ram_energy_kwh == pytest.approx(0.0006)
    assert totals.energy_kwh == pytest.approx(0.0122)
    assert totals.emissions_kg == pytest.approx(0.0305)
    assert (totals.duration_s, totals.rows) == (120.0, 2)
    assert Emission.objects.get(run=run, timestamp__minute=1).gpu_utilization_pct == 97.0


@pytest.mark.django_db
def test_codecarbon_2x_emission_shape_is_accepted(client, token):
    run_id = post(client, "/runs", run_payload(), token).json()["id"]
    payload = {k: v for k, v in emission_payload(run_id, "2026-11-30T10:01:00+00:00").items()
               if k in V2_EMISSION_KEYS}
    assert post(client, "/emissions", payload, token).status_code == 201
    assert Emission.objects.get().cpu_utilization_pct is None


@pytest.mark.django_db
def test_experiments_are_per_team(client, token, other_token):
    a = post(client, "/runs", run_payload(), token).json()["id"]
    b = post(client, "/runs", run_payload(), other_token).json()["id"]
    assert Run.objects.get(id=a).experiment_id != Run.objects.get(id=b).experiment_id
    assert Experiment.objects.filter(external_id=EXPERIMENT).count() == 2


@pytest.mark.django_db
def test_experiment_create_and_get(client, token, other_token):
    payload = dataclasses.asdict(schemas.ExperimentCreate(
        timestamp="2026-11-30T10:00:00", name="bert-finetune", description="demo",
        on_cloud=True, project_id=str(uuid.uuid4()), country_iso_code="USA",
        cloud_provider="aws", cloud_region="us-east-1"))
    payload["project_id"] = str(payload["project_id"])
    r = post(client, "/experiments", payload, token)
    assert r.status_code == 201, r.content
    exp_id = r.json()["id"]
    got = client.get(f"{BASE}/experiments/{exp_id}", HTTP_X_API_TOKEN=token)
    assert got.status_code == 200 and got.json()["name"] == "bert-finetune"
    assert client.get(f"{BASE}/experiments/{exp_id}",
                      HTTP_X_API_TOKEN=other_token).status_code == 404
    # A run in that experiment takes its country.
    run_id = post(client, "/runs", run_payload(exp_id), token).json()["id"]
    assert Run.objects.get(id=run_id).country_iso_code == "USA"


@pytest.mark.django_db
def test_missing_or_wrong_token_is_401_and_stores_nothing(client, team):
    for token in (None, "gha_wrong"):
        r = post(client, "/runs", run_payload(), token)
        assert r.status_code == 401
        assert r.json()["field"] == "x-api-token"
    assert not Run.objects.exists() and not Experiment.objects.exists()


@pytest.mark.django_db
def test_revoked_token_is_401(client, team):
    row, token = ApiToken.issue(team, "old")
    row.revoke()
    assert post(client, "/runs", run_payload(), token).status_code == 401


@pytest.mark.django_db
def test_bad_emission_names_the_field_and_stores_nothing(client, token):
    run_id = post(client, "/runs", run_payload(), token).json()["id"]
    bad = emission_payload(run_id, "2026-11-30T10:01:00+00:00", cpu_energy=-1.0)
    r = post(client, "/emissions", bad, token)
    assert r.status_code == 422
    assert r.json()["error"] == "validation_error" and r.json()["field"] == "cpu_energy"
    no_run = emission_payload(run_id, "2026-11-30T10:01:00+00:00")
    no_run.pop("run_id")
    assert post(client, "/emissions", no_run, token).json()["field"] == "run_id"
    assert not Emission.objects.exists()


@pytest.mark.django_db
def test_another_teams_run_is_404(client, token, other_token):
    run_id = post(client, "/runs", run_payload(), token).json()["id"]
    r = post(client, "/emissions", emission_payload(run_id, "2026-11-30T10:01:00+00:00"),
             other_token)
    assert r.status_code == 404 and r.json()["field"] == "run_id"
    assert not Emission.objects.exists()


CLIENT_SCRIPT = """
import sys
from codecarbon.core.api_client import ApiClient

conf = {"os": "Linux", "python_version": "3.11", "codecarbon_version": "3.3.2",
        "cpu_count": 8, "cpu_model": "Test CPU", "gpu_count": 0, "gpu_model": "",
        "longitude": None, "latitude": None, "region": "oregon", "provider": "",
        "ram_total_size": 16.0, "tracking_mode": "process"}
api = ApiClient(endpoint_url=sys.argv[1], experiment_id=sys.argv[2], api_key=sys.argv[3],
                conf=conf)
assert api.run_id, "no run id"
delta = dict(duration=30, emissions=0.002, emissions_rate=0.002 / 30, cpu_power=10.0,
             gpu_power=0.0, ram_power=6.0, cpu_energy=0.0001, gpu_energy=0.0,
             ram_energy=0.00005, energy_consumed=0.00015)
api.add_emission(delta)
print(api.run_id)
"""


@pytest.mark.django_db(transaction=True)
def test_real_codecarbon_client_against_live_server(live_server, team):
    token = ApiToken.issue(team, "client")[1]
    experiment = str(uuid.uuid4())
    env = {**os.environ, "CODECARBON_LOG_LEVEL": "error"}
    done = subprocess.run(
        [sys.executable, "-c", CLIENT_SCRIPT, live_server.url + BASE, experiment, token],
        capture_output=True, text=True, timeout=60, env=env,
    )
    assert done.returncode == 0, done.stderr[-2000:]
    run = Run.objects.get(id=done.stdout.strip().splitlines()[-1])
    assert (run.team, run.region, run.tracking_mode) == (team, "oregon", "process")
    emission = Emission.objects.get(run=run)
    assert (emission.duration_s, emission.cpu_energy_kwh, emission.energy_consumed_kwh) == (
        30.0, 0.0001, 0.00015)
