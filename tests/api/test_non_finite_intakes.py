"""Issue 8 item 8: every intake refuses non-finite numbers with the field named, storing nothing.

The four spellings that reach a parser: the JSON extensions ``Infinity`` and ``NaN`` (Python's
json module accepts them), the string ``"Infinity"`` (pydantic and float() accept it) and
``1e309`` (valid JSON that overflows a double to inf). Intakes: the codecarbon API, emissions.csv
upload, samples, host energy, training jobs, inventory and inference windows
(tests/kpis/test_inference_api.py covers the last one).
"""

from __future__ import annotations

import time
import uuid

import orjson
import pytest

from greenops.carbon import emissions_csv
from greenops.carbon.models import Emission, HostEnergySample, Run
from greenops.errors import FieldError
from greenops.teams.models import ApiToken
from greenops.telemetry.models import Gpu
from greenops.workloads.models import TrainingJob, Workload
from tests.support.carbon import (
    BASE,
    V2_CSV,
    _replace_cell,
    emission_payload,
    energy_batch,
    hour_start,
    run_payload,
)

MARK = 123456.5  # a value that appears once in a payload, replaced by the spelling under test
SPELLINGS = [b"Infinity", b"-Infinity", b"NaN", b"1e309", b'"Infinity"']


def swap(doc: dict, spelling: bytes) -> bytes:
    raw = orjson.dumps(doc)
    assert raw.count(b"123456.5") == 1
    return raw.replace(b"123456.5", spelling)


@pytest.fixture
def token(team):
    return ApiToken.issue(team, "intake")[1]


@pytest.mark.django_db
@pytest.mark.parametrize("spelling", SPELLINGS)
def test_codecarbon_emission(client, token, spelling):
    # The run total became "inf" on the page before: pydantic accepts inf unless told not to.
    r = client.post(BASE + "/runs", orjson.dumps(run_payload()), content_type="application/json",
                    HTTP_X_API_TOKEN=token)
    run_id = r.json()["id"]
    doc = emission_payload(run_id, "2026-11-30T10:01:00+00:00", gpu_energy=MARK)
    r = client.post(BASE + "/emissions", swap(doc, spelling), content_type="application/json",
                    HTTP_X_API_TOKEN=token)
    assert r.status_code == 422, r.content
    assert r.json()["field"] == "gpu_energy"
    assert not Emission.objects.exists()


@pytest.mark.django_db
@pytest.mark.parametrize("spelling", [b"Infinity", b"1e309", b'"Infinity"'])
def test_codecarbon_run(client, token, spelling):
    doc = {**run_payload(), "ram_total_size": MARK}
    r = client.post(BASE + "/runs", swap(doc, spelling), content_type="application/json",
                    HTTP_X_API_TOKEN=token)
    assert r.status_code == 422, r.content
    assert r.json()["field"] == "ram_total_size"
    assert not Run.objects.exists()


@pytest.mark.django_db
@pytest.mark.parametrize("cell", ["inf", "Infinity", "-inf", "nan", "NaN", "1e309"])
def test_emissions_csv(team, cell):
    with pytest.raises(FieldError) as exc:
        emissions_csv.import_file(team, _replace_cell(V2_CSV, 3, "gpu_energy", cell).encode())
    assert exc.value.field == "line 3.gpu_energy"
    assert not Run.objects.exists()


@pytest.mark.django_db
@pytest.mark.parametrize("spelling", SPELLINGS)
def test_gpu_samples(host, client, spelling):
    from tests.support.factories import make_batch
    from tests.support.telemetry import stored

    _, host_token = host
    doc = make_batch(n_per_gpu=3)
    doc["samples"]["power_w"][2] = MARK
    r = client.post("/api/v1/samples", swap(doc, spelling), content_type="application/json",
                    HTTP_AUTHORIZATION=f"Bearer {host_token}")
    assert r.status_code == 422, r.content
    assert r.json()["field"] == "samples.power_w[2]"
    assert stored() == (0, 0)


@pytest.mark.django_db
@pytest.mark.parametrize("spelling", SPELLINGS)
def test_host_energy(host, client, spelling):
    _, host_token = host
    t0 = hour_start(time.time())
    doc = energy_batch([t0 + 10, t0 + 20])
    doc["samples"]["cpu_energy_j"][1] = MARK
    r = client.post("/api/v1/host-energy", swap(doc, spelling), content_type="application/json",
                    HTTP_AUTHORIZATION=f"Bearer {host_token}")
    assert r.status_code == 422, r.content
    assert r.json()["field"] == "samples.cpu_energy_j[1]"
    assert not HostEnergySample.objects.exists()


@pytest.mark.django_db
@pytest.mark.parametrize("spelling", SPELLINGS)
def test_training_job_start(client, team, host, token, spelling):
    h, _ = host
    w = Workload.objects.create(team=team, name="LLM finetune", kind="training")
    w.hosts.add(h)
    doc = {"workload": "llm-finetune", "name": "x", "started_at": MARK}
    r = client.post("/api/v1/training-jobs", swap(doc, spelling), content_type="application/json",
                    HTTP_AUTHORIZATION=f"Bearer {token}")
    assert r.status_code == 422, r.content
    assert r.json()["field"] == "started_at"
    assert not TrainingJob.objects.exists()


@pytest.mark.django_db
@pytest.mark.parametrize("spelling", SPELLINGS)
def test_inventory(host, client, spelling):
    h, host_token = host
    before = list(Gpu.objects.filter(host=h).values_list("power_limit_w", flat=True))
    doc = {"hostname": "h", "gpus": [{"index": 0, "uuid": f"GPU-{uuid.uuid4()}", "name": "H100",
                                      "power_limit_w": MARK}]}
    r = client.post("/api/v1/inventory", swap(doc, spelling), content_type="application/json",
                    HTTP_AUTHORIZATION=f"Bearer {host_token}")
    assert r.status_code == 422, r.content
    assert r.json()["field"] == "gpus[0].power_limit_w"
    assert list(Gpu.objects.filter(host=h).values_list("power_limit_w", flat=True)) == before
