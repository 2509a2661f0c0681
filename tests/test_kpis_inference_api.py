"""POST /api/v1/inference: auth, storage, idempotency, and every validation rule."""

from __future__ import annotations

import copy
import time
import uuid

import orjson
import pytest

from greenops.kpis import histogram
from greenops.kpis.models import InferenceBatch, InferenceWindow
from greenops.teams.models import ApiToken
from greenops.workloads.models import Workload
from tests.conftest import gz


@pytest.fixture
def workload(team):
    return Workload.objects.create(team=team, name="Ranker", kind="inference")


@pytest.fixture
def token(team):
    return ApiToken.issue(team, "app")[1]


def payload(**window_overrides) -> dict:
    window = {"workload": "ranker", "end": time.time() - 10, "requests": 120, "success": 118,
              "failure": 2, "tokens": 5000,
              "latency": {"unit": "s", "le": [0.01, 0.1, 1.0], "counts": [10, 70, 110, 120],
                          "cumulative": True, "sum": 30.5}}
    window.update(window_overrides)
    return {"batch_id": str(uuid.uuid4()), "windows": [window]}


def post(client, token, doc, gzip_body=False, raw=None):
    body = raw if raw is not None else (gz(doc) if gzip_body else orjson.dumps(doc))
    headers = {"HTTP_AUTHORIZATION": f"Bearer {token}"} if token else {}
    if gzip_body:
        headers["HTTP_CONTENT_ENCODING"] = "gzip"
    return client.post("/api/v1/inference", body, content_type="application/json", **headers)


def test_window_is_stored_with_latencies_rebucketed(client, token, workload):
    r = post(client, token, payload(), gzip_body=True)
    assert r.status_code == 202, r.content
    assert r.json()["status"] == "stored" and r.json()["windows"] == 1
    w = InferenceWindow.objects.get()
    assert (w.workload, w.requests, w.success, w.failure, w.tokens) == (workload, 120, 118, 2,
                                                                       5000)
    assert w.latency_sum_ms == pytest.approx(30_500)
    # cumulative [10, 70, 110, 120] -> plain [10, 60, 40, 10] at 10 ms, 100 ms, 1 s, +Inf
    assert histogram.merge([w.latency_buckets]) == {
        histogram.bucket_of(10.0): 10, histogram.bucket_of(100.0): 60,
        histogram.bucket_of(1000.0): 40, histogram.OVERFLOW: 10}


def _totals(workload):
    """What the hourly rollup folds in: every window of the workload in the last hour."""
    import datetime as dt

    from greenops.kpis import measure, metrics

    end = dt.datetime.now(dt.UTC)
    return measure.add_inference(metrics.Totals(), [workload.id], end - dt.timedelta(hours=1),
                                 end)


def test_mean_only_latency_gives_a_mean_but_no_percentiles(client, token, workload):
    """Triton's default metrics: a cumulative duration sum and a request count, no buckets."""
    from greenops.kpis import metrics

    doc = payload(latency={"unit": "us", "sum": 4_500_000, "count": 90})
    assert post(client, token, doc).status_code == 202
    w = InferenceWindow.objects.get()
    assert (w.latency_sum_ms, w.latency_n, w.latency_buckets) == (4500.0, 90, {})
    summary = metrics.derive(_totals(workload), 3600.0)
    assert summary["latency_mean_ms"] == pytest.approx(50.0)
    assert summary["latency_p99_ms"] is None


def test_histogram_mean_counts_only_windows_with_a_sum(client, token, workload):
    from greenops.kpis import metrics

    with_sum = payload()  # 120 latencies summing to 30.5 s
    without_sum = payload(end=time.time() - 20)
    del without_sum["windows"][0]["latency"]["sum"]
    assert post(client, token, with_sum).status_code == 202
    assert post(client, token, without_sum).status_code == 202
    summary = metrics.derive(_totals(workload), 3600.0)
    assert summary["latency_mean_ms"] == pytest.approx(30_500 / 120)


@pytest.mark.parametrize("latency,field", [
    ({"unit": "us", "sum": 100}, "windows[0].latency.count"),
    ({"unit": "us", "count": 3}, "windows[0].latency.sum"),
    ({"unit": "s", "le": [0.1], "counts": [1, 2], "count": 4}, "windows[0].latency.count"),
])
def test_bad_mean_latency_is_rejected(client, token, workload, latency, field):
    r = post(client, token, payload(latency=latency))
    assert r.status_code == 422 and r.json()["field"] == field
    assert not InferenceWindow.objects.exists()


def test_resent_batch_stores_nothing_twice(client, token, workload):
    doc = payload()
    assert post(client, token, doc).json()["status"] == "stored"
    r = post(client, token, doc)
    assert r.status_code == 202 and r.json()["status"] == "duplicate"
    assert InferenceWindow.objects.count() == 1


def test_host_token_of_the_team_is_accepted(client, host, workload):
    _, host_token = host
    r = post(client, host_token, payload())
    assert r.status_code == 202
    assert InferenceBatch.objects.get().sender == "host gpu-node-1"


def test_batch_id_of_another_team_is_a_conflict(client, token, workload, other_team):
    doc = payload()
    InferenceBatch.objects.create(id=doc["batch_id"], team=other_team, windows=1)
    r = post(client, token, doc)
    assert r.status_code == 409 and r.json()["field"] == "batch_id"
    assert not InferenceWindow.objects.exists()


@pytest.mark.parametrize("auth", [None, "gha_wrong", "Basic abc"])
def test_missing_or_unknown_token_is_401(client, workload, auth):
    headers = {"HTTP_AUTHORIZATION": auth} if auth and auth.startswith("Basic") else {}
    if auth and not auth.startswith("Basic"):
        headers["HTTP_AUTHORIZATION"] = f"Bearer {auth}"
    r = client.post("/api/v1/inference", orjson.dumps(payload()),
                    content_type="application/json", **headers)
    assert r.status_code == 401
    assert r.json()["error"] == "unauthorized" and r.json()["field"] == "Authorization"
    assert not InferenceBatch.objects.exists()


def test_revoked_token_is_401(client, team, workload):
    row, token = ApiToken.issue(team, "old")
    row.revoke()
    assert post(client, token, payload()).status_code == 401


def test_another_teams_token_cannot_report_for_this_teams_workload(client, workload, other_team):
    token = ApiToken.issue(other_team, "theirs")[1]
    r = post(client, token, payload())
    assert r.status_code == 422 and r.json()["field"] == "windows[0].workload"
    assert not InferenceWindow.objects.exists()


def _set(path: str, value):
    """A mutation of the valid payload: set the dotted path (in windows[0]) to value."""
    def apply(doc):
        node, keys = doc["windows"][0], path.split(".")
        for k in keys[:-1]:
            node = node[k]
        if value is DELETE:
            del node[keys[-1]]
        else:
            node[keys[-1]] = value
        return doc
    return apply


DELETE = object()
NOW = time.time()
BAD = [
    (lambda d: {**d, "batch_id": "nope"}, 422, "batch_id"),
    (lambda d: {k: v for k, v in d.items() if k != "batch_id"}, 422, "batch_id"),
    (lambda d: {**d, "windows": []}, 422, "windows"),
    (lambda d: {**d, "windows": {"a": 1}}, 422, "windows"),
    (lambda d: {**d, "windows": d["windows"] * 1001}, 413, "windows"),
    (lambda d: {**d, "extra": 1}, 422, "extra"),
    (lambda d: {**d, "windows": [5]}, 422, "windows[0]"),
    (_set("colour", "red"), 422, "windows[0].colour"),
    (_set("workload", "unknown"), 422, "windows[0].workload"),
    (_set("workload", 3), 422, "windows[0].workload"),
    (_set("end", "yesterday"), 422, "windows[0].end"),
    (_set("end", NOW + 3600), 422, "windows[0].end"),
    (_set("end", NOW - 40 * 86400), 422, "windows[0].end"),
    (_set("requests", DELETE), 422, "windows[0].requests"),
    (_set("requests", -1), 422, "windows[0].requests"),
    (_set("requests", 1.5), 422, "windows[0].requests"),
    (_set("requests", True), 422, "windows[0].requests"),
    (_set("success", -2), 422, "windows[0].success"),
    (_set("failure", "2"), 422, "windows[0].failure"),
    (_set("tokens", -5), 422, "windows[0].tokens"),
    (_set("latency", [1, 2]), 422, "windows[0].latency"),
    (_set("latency.p99", 3), 422, "windows[0].latency.p99"),
    (_set("latency.unit", "min"), 422, "windows[0].latency.unit"),
    (_set("latency.le", []), 422, "windows[0].latency.le"),
    (_set("latency.le", [0.1, 0.01, 1.0]), 422, "windows[0].latency.le[1]"),
    (_set("latency.le", [0.0, 0.1, 1.0]), 422, "windows[0].latency.le[0]"),
    (_set("latency.le", [0.01, "x", 1.0]), 422, "windows[0].latency.le[1]"),
    (_set("latency.counts", [1, 2, 3]), 422, "windows[0].latency.counts"),
    (_set("latency.counts", [1, 2, -3, 4]), 422, "windows[0].latency.counts[2]"),
    (_set("latency.counts", [10, 70, 60, 120]), 422, "windows[0].latency.counts[2]"),
    (_set("latency.cumulative", "yes"), 422, "windows[0].latency.cumulative"),
    (_set("latency.sum", -1.0), 422, "windows[0].latency.sum"),
]


@pytest.mark.parametrize("mutate,status,field", BAD)
def test_bad_input_names_the_field_and_stores_nothing(client, token, workload, mutate, status,
                                                      field):
    doc = mutate(copy.deepcopy(payload()))
    r = post(client, token, doc)
    assert r.status_code == status, r.content
    assert r.json()["field"] == field
    assert r.json()["message"]
    assert not InferenceBatch.objects.exists() and not InferenceWindow.objects.exists()


def test_one_bad_window_among_good_ones_rejects_all(client, token, workload):
    doc = payload()
    doc["windows"].append({**doc["windows"][0], "end": doc["windows"][0]["end"] + 1,
                           "requests": -3})
    r = post(client, token, doc)
    assert r.status_code == 422 and r.json()["field"] == "windows[1].requests"
    assert not InferenceWindow.objects.exists()


def test_two_windows_with_the_same_end_are_rejected(client, token, workload):
    doc = payload()
    doc["windows"].append(dict(doc["windows"][0]))
    r = post(client, token, doc)
    assert r.status_code == 422 and r.json()["field"] == "windows[1].end"


@pytest.mark.parametrize("raw,status", [(b"{not json", 400), (b"\x1f\x8b broken", 400)])
def test_malformed_bodies(client, token, workload, raw, status):
    r = post(client, token, None, raw=raw)
    assert r.status_code == status
    assert not InferenceBatch.objects.exists()
