"""POST /api/v1/host-energy: validation, idempotency, and the HostEnergyHour rollup."""

from __future__ import annotations

import datetime as dt
import time

import orjson
import pytest

from greenops.carbon import host_energy
from greenops.carbon.models import HostEnergySample
from greenops.telemetry.models import HostEnergyHour
from tests.support.carbon import HOUR, energy_batch, hour_start
from tests.support.factories import gz, make_host


@pytest.fixture
def post(client):
    def send(token: str | None, doc, gzip_body: bool = False):
        body = gz(doc) if gzip_body else orjson.dumps(doc)
        headers = {"HTTP_AUTHORIZATION": f"Bearer {token}"} if token else {}
        if gzip_body:
            headers["HTTP_CONTENT_ENCODING"] = "gzip"
        return client.post("/api/v1/host-energy", body, content_type="application/json",
                           **headers)

    return send


@pytest.mark.django_db
def test_batch_is_stored_and_rolled_into_hours(host, post):
    h, token = host
    t0 = hour_start(time.time())
    # Three samples in the first hour (15 s apart) and two in the next one.
    ts = [t0 + 15, t0 + 30, t0 + 45, t0 + HOUR + 15, t0 + HOUR + 30]
    r = post(token, energy_batch(ts), gzip_body=True)
    assert r.status_code == 200, r.content
    assert r.json()["status"] == "stored" and r.json()["inserted"] == 5
    hours = list(HostEnergyHour.objects.filter(host=h).order_by("bucket"))
    assert [x.bucket.timestamp() for x in hours] == [t0, t0 + HOUR]
    assert [(x.cpu_energy_j, x.ram_energy_j, x.samples) for x in hours] == [
        (1800.0, 270.0, 3), (1200.0, 180.0, 2)]
    assert {(x.cpu_method, x.ram_method) for x in hours} == {("rapl", "model")}
    sample = HostEnergySample.objects.filter(host=h).first()
    assert (sample.codecarbon_version, sample.tracking_mode) == ("3.3.2", "machine")


@pytest.mark.django_db
def test_replay_and_overlap_store_nothing_twice(host, post):
    h, token = host
    t0 = hour_start(time.time())
    doc = energy_batch([t0 + 10, t0 + 20])
    assert post(token, doc).json()["inserted"] == 2
    again = post(token, doc).json()
    assert (again["status"], again["inserted"]) == ("duplicate", 0)
    # A new batch overlapping the first: only t0+30 is new, measured another way.
    overlap = energy_batch([t0 + 20, t0 + 30], cpu_method="tdp")
    assert post(token, overlap).json()["inserted"] == 1
    hour = HostEnergyHour.objects.get(host=h)
    assert (hour.cpu_energy_j, hour.samples) == (1800.0, 3)
    assert hour.cpu_method == "mixed" and hour.ram_method == "model"


@pytest.mark.django_db
@pytest.mark.parametrize(
    ("mutate", "field"),
    [
        (lambda d: d.pop("batch_id"), "batch_id"),
        (lambda d: d.update(source="rapl"), "source"),
        (lambda d: d.update(tracking_mode="gpu"), "tracking_mode"),
        (lambda d: d.pop("codecarbon_version"), "codecarbon_version"),
        (lambda d: d["samples"]["cpu_energy_j"].__setitem__(1, -5.0), "samples.cpu_energy_j[1]"),
        (lambda d: d["samples"]["ram_power_w"].__setitem__(0, "6"), "samples.ram_power_w[0]"),
        (lambda d: d["samples"]["cpu_method"].__setitem__(1, "guess"), "samples.cpu_method[1]"),
        (lambda d: d["samples"]["ram_method"].pop(), "samples.ram_method"),
        (lambda d: d["samples"].update(gpu_energy_j=[1, 2]), "samples.gpu_energy_j"),
        (lambda d: d["samples"]["ts"].__setitem__(1, time.time() + 3600), "samples.ts[1]"),
        (lambda d: d["samples"]["ts"].__setitem__(1, d["samples"]["ts"][0]), "samples.ts"),
    ],
)
def test_bad_input_names_the_field_and_stores_nothing(host, post, mutate, field):
    h, token = host
    t0 = hour_start(time.time())
    doc = energy_batch([t0 + 10, t0 + 20])
    mutate(doc)
    r = post(token, doc)
    assert r.status_code == 422, r.content
    assert r.json()["error"] == "validation_error" and r.json()["field"] == field
    assert not HostEnergySample.objects.exists() and not HostEnergyHour.objects.exists()


@pytest.mark.django_db
def test_unknown_token_is_401(host, post):
    t0 = hour_start(time.time())
    r = post("gho_not-a-token", energy_batch([t0 + 10]))
    assert r.status_code == 401 and r.json()["field"] == "Authorization"
    assert post(None, energy_batch([t0 + 10])).status_code == 401
    assert not HostEnergySample.objects.exists()


@pytest.mark.django_db
def test_hours_are_per_host(team, post):
    a, token_a = make_host(team, "a")
    b, token_b = make_host(team, "b")
    t0 = hour_start(time.time())
    post(token_a, energy_batch([t0 + 10]))
    post(token_b, energy_batch([t0 + 10, t0 + 20]))
    assert HostEnergyHour.objects.get(host=a).samples == 1
    assert HostEnergyHour.objects.get(host=b).samples == 2


def test_parse_converts_nulls_and_timestamps():
    t0 = 1_764_000_000.0
    doc = energy_batch([t0, t0 + 15.5])
    doc["samples"]["cpu_power_w"] = [None, 12.5]
    batch = host_energy.parse(doc, now_s=t0 + 60)
    assert batch.floats["cpu_power_w"] == [None, 12.5]
    assert batch.ts[1] == dt.datetime.fromtimestamp(t0 + 15.5, dt.UTC)
