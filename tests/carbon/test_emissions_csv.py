"""emissions.csv upload: files written by codecarbon 3.x (by its own FileOutput, in a subprocess)
and 2.x (header copied from codecarbon 2.8.4's EmissionsData), bad files, access."""

from __future__ import annotations

import os
import subprocess
import sys
import uuid

import pytest
from django.core.files.uploadedfile import SimpleUploadedFile

from greenops.carbon import emissions_csv
from greenops.carbon.models import Emission, Run
from greenops.carbon.runs import runs_with_totals
from greenops.errors import FieldError
from greenops.teams.models import ApiToken
from tests.support.carbon import EXP, RUN_A, RUN_B, V2_CSV, _replace_cell

WRITE_V3 = """
import sys
from codecarbon.output_methods.emissions_data import EmissionsData
from codecarbon.output_methods.file import FileOutput

out = FileOutput("emissions.csv", sys.argv[1])
out.out(EmissionsData(
    timestamp="2026-11-29T15:00:00", project_name="bert", run_id=sys.argv[2],
    experiment_id=sys.argv[3], duration=3600.0, emissions=0.4, emissions_rate=0.4 / 3600,
    cpu_power=60.0, gpu_power=350.0, ram_power=20.0, cpu_energy=0.06, gpu_energy=0.35,
    ram_energy=0.02, energy_consumed=0.43, water_consumed=0.0, country_name="United States",
    country_iso_code="USA", region="virginia", cloud_provider="aws", cloud_region="us-east-1",
    os="Linux", python_version="3.11.7", codecarbon_version="3.3.2", cpu_count=8.0,
    cpu_model="Intel Xeon", gpu_count=1.0, gpu_model="1 x NVIDIA A10G", longitude=-77.5,
    latitude=39.0, ram_total_size=32.0, tracking_mode="process", cpu_utilization_percent=40.0,
    gpu_utilization_percent=90.0, ram_utilization_percent=25.0, ram_used_gb=8.0, on_cloud="Y",
    pue=1.0, wue=0.0), None)
"""


# The tests of the codecarbon 3.x file stay on one xdist worker (--dist loadgroup): its file is
# written once, by codecarbon in a subprocess.
pytestmark = pytest.mark.xdist_group("codecarbon-v3-csv")


@pytest.fixture(scope="module")
def v3_csv(tmp_path_factory) -> bytes:
    folder = tmp_path_factory.mktemp("cc3")
    done = subprocess.run([sys.executable, "-c", WRITE_V3, str(folder), RUN_A, EXP],
                          capture_output=True, text=True, timeout=60,
                          env={**os.environ, "CODECARBON_LOG_LEVEL": "error"})
    assert done.returncode == 0, done.stderr[-2000:]
    return (folder / "emissions.csv").read_bytes()


def test_formats_are_detected(v3_csv):
    assert emissions_csv.parse(V2_CSV.encode()).format == "codecarbon 2.x"
    assert emissions_csv.parse(v3_csv).format == "codecarbon 3.x"


@pytest.mark.django_db
def test_v2_file_keeps_the_longest_row_per_run(team):
    result = emissions_csv.import_file(team, V2_CSV.encode())
    assert result == {"format": "codecarbon 2.x", "rows": 3, "runs_created": 2,
                      "runs_updated": 0, "runs_skipped": 0}
    totals = {str(r.codecarbon_run_id): r for r in runs_with_totals(team)}
    a = totals[RUN_A]
    assert (a.duration_s, a.cpu_energy_kwh, a.gpu_energy_kwh, a.ram_energy_kwh) == (
        900.0, 0.0105, 0.075, 0.003)
    assert (a.energy_kwh, a.emissions_kg, a.rows) == (0.0885, 0.08, 1)
    assert (a.country_iso_code, a.source, a.codecarbon_version) == ("DEU", "csv", "2.8.4")
    # Started = end timestamp - duration.
    assert a.started_at.isoformat() == "2026-11-29T13:45:00+00:00"
    assert totals[RUN_B].gpu_count is None


@pytest.mark.django_db
def test_v3_file_written_by_codecarbon(team, v3_csv):
    result = emissions_csv.import_file(team, v3_csv)
    assert (result["format"], result["runs_created"]) == ("codecarbon 3.x", 1)
    run = runs_with_totals(team).get()
    assert (run.energy_kwh, run.emissions_kg, run.gpu_energy_kwh) == (0.43, 0.4, 0.35)
    assert (run.cloud_region, run.provider, run.country_iso_code) == ("us-east-1", "aws", "USA")
    assert run.experiment.on_cloud is True
    assert Emission.objects.get().gpu_utilization_pct == 90.0


@pytest.mark.django_db
def test_reupload_is_idempotent(team):
    emissions_csv.import_file(team, V2_CSV.encode())
    again = emissions_csv.import_file(team, V2_CSV.encode())
    assert (again["runs_created"], again["runs_updated"]) == (0, 2)
    assert Run.objects.count() == 2 and Emission.objects.count() == 2




@pytest.mark.parametrize(
    ("data", "field", "words"),
    [
        (_replace_cell(V2_CSV, 3, "cpu_energy", "abc"), "line 3.cpu_energy", "not a number"),
        (_replace_cell(V2_CSV, 2, "emissions", "-0.1"), "line 2.emissions", "negative"),
        (_replace_cell(V2_CSV, 4, "duration", ""), "line 4.duration", "empty"),
        (_replace_cell(V2_CSV, 2, "run_id", "run-1"), "line 2.run_id", "not a UUID"),
        (_replace_cell(V2_CSV, 2, "timestamp", "yesterday"), "line 2.timestamp", "ISO 8601"),
        (V2_CSV.replace(",pue\n", "\n", 1), "line 1.pue", "missing column"),
        (V2_CSV.replace("on_cloud,pue", "on_cloud,pue,colour", 1), "line 1.colour",
         "unexpected"),
        (V2_CSV.splitlines()[0] + "\n", "file", "no rows"),
        ("", "file", "empty"),
        (V2_CSV + "2026-11-29,codecarbon\n", "line 5", "fields"),
    ],
)
@pytest.mark.django_db
def test_bad_files_name_line_and_column_and_store_nothing(team, data, field, words):
    with pytest.raises(FieldError) as exc:
        emissions_csv.import_file(team, data.encode())
    assert exc.value.field == field
    assert words in exc.value.message
    assert not Run.objects.exists()


@pytest.mark.django_db
def test_api_upload_with_team_token(client, team):
    token = ApiToken.issue(team, "ci")[1]
    upload = SimpleUploadedFile("emissions.csv", V2_CSV.encode(), content_type="text/csv")
    r = client.post("/api/v1/codecarbon/emissions-csv", {"file": upload},
                    HTTP_AUTHORIZATION=f"Bearer {token}")
    assert r.status_code == 200, r.content
    assert r.json()["runs_created"] == 2
    bad = SimpleUploadedFile("emissions.csv", _replace_cell(V2_CSV, 3, "gpu_energy", "x").encode())
    r = client.post("/api/v1/codecarbon/emissions-csv", {"file": bad},
                    HTTP_AUTHORIZATION=f"Bearer {token}")
    assert r.status_code == 422 and r.json()["field"] == "line 3.gpu_energy"
    assert Run.objects.count() == 2
    r = client.post("/api/v1/codecarbon/emissions-csv",
                    {"file": SimpleUploadedFile("e.csv", V2_CSV.encode())})
    assert r.status_code == 401


@pytest.mark.django_db
def test_client_runs_are_not_overwritten_by_csv(team):
    from greenops.carbon import runs

    run = runs.create_client_run(team, uuid.UUID(EXP), runs_started(), {})
    text = V2_CSV.replace(RUN_A, str(run.codecarbon_run_id))
    result = emissions_csv.import_file(team, text.encode())
    assert (result["runs_skipped"], result["runs_created"]) == (1, 1)
    run.refresh_from_db()
    assert run.source == "client"


def runs_started():
    import datetime as dt

    return dt.datetime(2026, 11, 29, 10, tzinfo=dt.UTC)
