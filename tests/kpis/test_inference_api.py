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
from tests.support.factories import gz


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


def test_window_is_stored_with_latencies_in_their_own_bounds(client, token, workload):
    r = post(client, token, payload(), gzip_body=True)
    assert r.status_code == 202, r.content
    assert r.json()["status"] == "stored" and r.json()["windows"] == 1
    w = InferenceWindow.objects.get()
    assert (w.workload, w.requests, w.success, w.failure, w.tokens) == (workload, 120, 118, 2,
                                                                       5000)
    assert w.latency_sum_ms == pytest.approx(30_500)
    # The sender's own bounds, converted to ms, cumulative: 10 <= 10 ms, 70 <= 100 ms, ...
    assert w.latency_buckets == {"le_ms": [10.0, 100.0, 1000.0], "cumulative": [10, 70, 110, 120]}
    # p50: rank 60 -> (10, 100] ms: 10 + 90 x (60-10)/(70-10) = 85 ms (histogram_quantile).
    assert histogram.quantile_ms(w.latency_buckets, 0.5) == pytest.approx(85.0)


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
    (_set("latency.sum", "Infinity"), 422, "windows[0].latency.sum"),
    (_set("start", NOW + 3000), 422, "windows[0].start"),  # not before end
    (_set("start", "Infinity"), 422, "windows[0].start"),
    (_set("prompt_tokens", -1), 422, "windows[0].prompt_tokens"),
    (_set("server_energy_j", "Infinity"), 422, "windows[0].server_energy_j"),
    (_set("server_energy_j", -5.0), 422, "windows[0].server_energy_j"),
    (_set("timings", [1]), 422, "windows[0].timings"),
    (_set("timings", {"p99": {"sum": 1, "count": 1}}), 422, "windows[0].timings.p99"),
    (_set("timings", {"queue": {"unit": "us", "sum": 5}}), 422, "windows[0].timings.queue.count"),
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


def test_one_bad_window_loses_only_itself(client, token, workload):
    """Issue 8 item 6: the valid windows are stored, the refused one is named."""
    doc = payload()
    first = doc["windows"][0]
    doc["windows"].append({**first, "end": first["end"] + 1,
                           "latency": {**first["latency"], "counts": [10, 70, 60, 120]}})
    doc["windows"].append({**first, "end": first["end"] + 2, "requests": 7})
    r = post(client, token, doc)
    assert r.status_code == 202, r.content
    body = r.json()
    assert (body["status"], body["windows"]) == ("stored", 2)
    assert body["refused"] == [{
        "index": 1, "field": "windows[1].latency.counts[2]",
        "message": "cumulative counts must not decrease from one bound to the next"}]
    assert sorted(InferenceWindow.objects.values_list("requests", flat=True)) == [7, 120]
    # A resend stores nothing twice and names the same refused window.
    again = post(client, token, doc).json()
    assert again["status"] == "duplicate" and again["refused"] == body["refused"]
    assert InferenceWindow.objects.count() == 2


def test_a_batch_whose_every_window_is_refused_is_422(client, token, workload):
    doc = payload(requests=-3)
    doc["windows"].append({**doc["windows"][0], "end": doc["windows"][0]["end"] + 1})
    r = post(client, token, doc)
    assert r.status_code == 422 and r.json()["field"] == "windows[0].requests"
    assert not InferenceBatch.objects.exists() and not InferenceWindow.objects.exists()


def test_two_windows_with_the_same_end_refuse_the_second(client, token, workload):
    doc = payload()
    doc["windows"].append(dict(doc["windows"][0]))
    r = post(client, token, doc)
    assert r.status_code == 202
    assert [x["field"] for x in r.json()["refused"]] == ["windows[1].end"]
    assert InferenceWindow.objects.count() == 1


def test_start_timings_prompt_tokens_and_server_energy_are_stored(client, token, workload):
    end = time.time() - 10
    doc = payload(start=end - 15, end=end, prompt_tokens=31500, server_energy_j=60000.0,
                  timings={
                      "first_response": {"unit": "ms", "le": [100, 500, 2000, 5000],
                                         "counts": [30, 50, 80, 80, 80], "cumulative": True,
                                         "sum": 10620},
                      "queue": {"unit": "us", "sum": 4_000_000, "count": 80},
                  })
    assert post(client, token, doc).status_code == 202
    w = InferenceWindow.objects.get()
    assert (w.end - w.start).total_seconds() == pytest.approx(15.0, abs=1e-3)
    assert (w.prompt_tokens, w.server_energy_j) == (31500, 60000.0)
    assert w.timings["queue"] == {"sum_ms": 4000.0, "n": 80, "hist": {}}  # 50 ms mean
    fr = w.timings["first_response"]
    assert (fr["sum_ms"], fr["n"]) == (10620.0, 80)  # 132.75 ms mean
    # p50: rank 40 -> (100, 500] ms: 100 + 400 x (40-30)/(50-30) = 300 ms.
    assert histogram.quantile_ms(fr["hist"], 0.5) == pytest.approx(300.0)


NON_FINITE = [
    (b'"end": Infinity', "windows[0].end"),
    (b'"end": 1e309', "windows[0].end"),
    (b'"end": NaN', "windows[0].end"),
    (b'"requests": 120, "server_energy_j": -1e309', "windows[0].server_energy_j"),
]


@pytest.mark.parametrize("literal,field", NON_FINITE)
def test_non_finite_numbers_are_refused_with_their_field(client, token, workload, literal,
                                                         field):
    doc = payload()
    raw = orjson.dumps(doc)
    raw = raw.replace(b'"end":' + orjson.dumps(doc["windows"][0]["end"]), b"@@", 1)
    raw = raw.replace(b'"requests":120', b"@@@", 1)
    if literal.startswith(b'"end"'):
        raw = raw.replace(b"@@@", b'"requests":120').replace(b"@@", literal)
    else:
        raw = raw.replace(b"@@@", literal).replace(
            b"@@", b'"end":' + orjson.dumps(doc["windows"][0]["end"]))
    r = post(client, token, None, raw=raw)
    assert r.status_code == 422, r.content
    assert r.json()["field"] == field
    assert not InferenceWindow.objects.exists()


@pytest.mark.parametrize("raw,status", [(b"{not json", 400), (b"\x1f\x8b broken", 400)])
def test_malformed_bodies(client, token, workload, raw, status):
    r = post(client, token, None, raw=raw)
    assert r.status_code == status
    assert not InferenceBatch.objects.exists()
