"""collectors/client.py against a live test server."""

from __future__ import annotations

import pytest

from collectors.client import GreenOpsClient, GreenOpsError, bucket_counts
from greenops.kpis import histogram
from greenops.kpis.models import InferenceWindow
from greenops.teams.models import ApiToken
from greenops.workloads.models import TrainingJob, Workload
from tests.support.factories import make_host


@pytest.fixture
def setup(transactional_db, team):
    host, _ = make_host(team, "gpu-node-1", gpus=2)
    Workload.objects.create(team=team, name="Ranker", kind="inference")
    trainer = Workload.objects.create(team=team, name="Finetune", kind="training")
    trainer.hosts.add(host)
    return ApiToken.issue(team, "client")[1]


def test_bucket_counts_match_the_server_layout():
    values = [0.05, 1.0, 12.5, 12.5, 999.0, 5e6]
    counts = bucket_counts(values)
    assert len(counts) == len(histogram.BOUNDS_MS) + 1
    assert histogram.from_buckets(histogram.BOUNDS_MS, counts, cumulative=False) == \
        histogram.from_values(values)
    # 1.0 ms is a bound (index 20): counted in its own bucket, le semantics.
    assert counts[20] == 1 and counts[-1] == 1  # 5e6 ms is above 1,000 s: +Inf


def test_record_inferences_round_trip(live_server, setup):
    client = GreenOpsClient(live_server.url, setup)
    latencies = [10.0] * 95 + [250.0] * 5
    answer = client.record_inferences("ranker", 100, latencies_ms=latencies, tokens=3000)
    assert answer["status"] == "stored" and answer["windows"] == 1
    w = InferenceWindow.objects.get()
    assert (w.requests, w.tokens) == (100, 3000)
    assert w.latency_sum_ms == pytest.approx(sum(latencies))
    # p99: rank 99 of 100 lies among the five 250 ms values, in the client's bucket
    # (10^(67/20), 10^(68/20)] = (223.872, 251.189] ms holding all 5 (95 below it):
    # 223.872 + (251.189 - 223.872) x (99 - 95)/5, as histogram_quantile interpolates.
    lo, hi = histogram.BOUNDS_MS[67], histogram.BOUNDS_MS[68]
    assert (lo, hi) == (223.872114, 251.188643)
    assert histogram.quantile_ms(w.latency_buckets, 0.99) == pytest.approx(lo + (hi - lo) * 0.8)


def test_errors_name_the_field(live_server, setup):
    client = GreenOpsClient(live_server.url, setup, retries=0)
    with pytest.raises(GreenOpsError) as exc:
        client.record_inferences("no-such-workload", 5)
    assert exc.value.status == 422 and exc.value.field == "windows[0].workload"
    with pytest.raises(GreenOpsError) as exc:
        GreenOpsClient(live_server.url, "gha_bad", retries=0).record_inferences("ranker", 1)
    assert exc.value.status == 401
    assert not InferenceWindow.objects.exists()


def test_training_job_context_manager_stops_the_job_even_on_error(live_server, setup):
    client = GreenOpsClient(live_server.url, setup)
    with client.training_job("finetune", "run 1", host="gpu-node-1", gpus=[0]) as job:
        assert job["running"] is True
        assert TrainingJob.objects.get().stopped_at is None
    assert job["running"] is False and job["time_to_train_s"] >= 0
    with pytest.raises(RuntimeError), client.training_job("finetune", "run 2"):
        raise RuntimeError("training crashed")
    assert TrainingJob.objects.filter(stopped_at__isnull=True).count() == 0
    assert TrainingJob.objects.get(name="run 2").gpus.count() == 2


def test_unreachable_server_is_reported(setup):
    client = GreenOpsClient("http://127.0.0.1:9", setup, timeout_s=0.5, retries=0)
    with pytest.raises(GreenOpsError) as exc:
        client.record_inferences("ranker", 1)
    assert exc.value.code == "unreachable"
