"""Storing is optimistic: a group's samples are copied straight into the samples table and the
minutes the worker aggregated folded into the rollups, inside a savepoint (a single batch: a
plain INSERT of the staged samples). Whenever that would be wrong -- a sample already stored, two
batches of a group carrying one sample, a concurrent writer that commits the same sample first,
or rows the retention guard drops -- it is rolled back and the ON CONFLICT statement runs, which
folds only the rows really inserted. These tests pin down which way was taken, and that the
answers (samples stored, per-batch credit, rollups) are the same either way."""

from __future__ import annotations

import threading
import time
import uuid

import psycopg
import pytest
from django.db import connection
from django.db.models import Sum

from greenops.telemetry import ingest
from greenops.telemetry.models import GpuDay, GpuHour, GpuMinute, GpuSample, IngestBatch
from tests.support.factories import gz, make_batch, make_host

pytestmark = pytest.mark.skipif(connection.vendor != "postgresql",
                                reason="the optimistic move is the PostgreSQL path")


def pend(host, doc) -> str:
    IngestBatch.objects.create(id=doc["batch_id"], host=host, n_samples=len(doc["samples"]["ts"]),
                               payload=gz(doc), gzip_encoded=True)
    return doc["batch_id"]


class Statements:
    """Which way storing went, in order: 'plain' (the optimistic COPY, or a single batch's plain
    INSERT), 'rollback' (its savepoint undone) and 'on conflict' (the fallback). An execute
    wrapper, not the query log (prepared statements are logged without their text), and a spy
    on the optimistic COPY, which no execute wrapper sees."""

    def __init__(self) -> None:
        self.ran: list[str] = []

    def __call__(self, execute, sql, params, many, context):
        if "INSERT INTO telemetry_gpusample" in sql:
            self.ran.append("on conflict" if "ON CONFLICT DO NOTHING" in sql else "plain")
        elif sql.startswith("ROLLBACK TO SAVEPOINT"):
            self.ran.append("rollback")
        return execute(sql, params, many, context)


def store(batch_id: str) -> tuple[int | None, list[str]]:
    from greenops.telemetry import store as writer

    record = Statements()
    optimistic = writer._store_new

    def spied(*args, **kwargs):
        record.ran.append("plain")
        return optimistic(*args, **kwargs)

    with pytest.MonkeyPatch.context() as mp, connection.execute_wrapper(record):
        mp.setattr(writer, "_store_new", spied)
        stored = ingest.process_pending(batch_id)
    return stored, record.ran


def rollups_match_raw() -> None:
    """Every minute, hour and day rollup holds exactly its raw samples (count and sums)."""
    raw = GpuSample.objects.aggregate(e=Sum("energy_j"), p=Sum("power_w"))
    for model in (GpuMinute, GpuHour, GpuDay):
        got = model.objects.aggregate(n=Sum("samples"), e=Sum("energy_j"), p=Sum("power_sum_w"))
        assert got["n"] == GpuSample.objects.count(), model.__name__
        assert got["e"] == pytest.approx(raw["e"]) and got["p"] == pytest.approx(raw["p"])


@pytest.mark.django_db(transaction=True)
def test_new_samples_take_the_plain_insert_and_a_resend_falls_back(team):
    host, _ = make_host(team, name="optimistic", gpus=2)
    t0 = float(int(time.time()) - 900)
    first = make_batch(n_per_gpu=30, start=t0)  # 60 new samples
    assert store(pend(host, first)) == (60, ["plain"])

    # The same samples under a new batch id, plus 10 s more per GPU: 20 new of 80.
    again = make_batch(n_per_gpu=40, start=t0)
    assert store(pend(host, again)) == (20, ["plain", "rollback", "on conflict"])

    # After a fallback the connection's prepared statements are gone (psycopg deallocates them
    # on ROLLBACK); the next group prepares again and takes the plain path.
    later = make_batch(n_per_gpu=10, start=t0 + 40)
    assert store(pend(host, later)) == (20, ["plain"])
    assert GpuSample.objects.count() == 100
    rollups_match_raw()
    assert GpuMinute.objects.filter(util_n__gt=0).count() == GpuHour.objects.aggregate(
        m=Sum("util_minutes"))["m"] == GpuDay.objects.aggregate(m=Sum("util_minutes"))["m"]


@pytest.mark.django_db(transaction=True)
def test_two_batches_of_one_group_with_a_shared_sample_credit_the_first(team):
    """Within one group the plain INSERT meets its own duplicate: it fails, and the fallback
    credits the shared samples to the batch that arrived first."""
    host, _ = make_host(team, name="shared-sample", gpus=1)
    t0 = float(int(time.time()) - 900)
    a = pend(host, make_batch(n_per_gpu=6, gpus=(0,), start=t0))
    b = pend(host, make_batch(n_per_gpu=6, gpus=(0,), start=t0 + 4))  # t0+4, t0+5 are a's too
    assert store(b) == (4, ["plain", "rollback", "on conflict"])
    credited = dict(IngestBatch.objects.values_list("id", "inserted"))
    assert (credited[uuid.UUID(a)], credited[uuid.UUID(b)]) == (6, 4)
    assert GpuSample.objects.count() == 10
    rollups_match_raw()


@pytest.mark.django_db(transaction=True)
def test_a_sample_another_writer_commits_meanwhile_is_stored_once(team):
    """Another transaction inserts one of the group's samples and commits while the optimistic
    COPY waits on it: the COPY fails, the fallback skips that sample, nothing is counted twice."""
    host, _ = make_host(team, name="race", gpus=1)
    gpu_id = host.gpus.get(index=0).id
    t0 = float(int(time.time()) - 900)
    doc = make_batch(n_per_gpu=5, gpus=(0,), start=t0)
    batch_id = pend(host, doc)
    params = {k: v for k, v in connection.get_connection_params().items()
              if k != "cursor_factory"}
    result: list = []
    with psycopg.connect(**params) as other:
        # The other writer stores the sample at t0+2 and holds its transaction open.
        other.execute(
            "INSERT INTO telemetry_gpusample (gpu_id, ts, util_pct, power_w, energy_j, simulated)"
            " VALUES (%s, to_timestamp(%s), 50, 200, 200, false)", (gpu_id, t0 + 2))

        def work() -> None:
            try:
                result.append(ingest.process_pending(batch_id))
            finally:
                connection.close()  # this thread's own connection

        worker = threading.Thread(target=work)
        worker.start()
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline:  # until the worker's COPY waits on our row
            other.execute("SELECT pg_stat_clear_snapshot()")  # kept per transaction otherwise
            waiting = other.execute(
                "SELECT count(*) FROM pg_stat_activity WHERE wait_event_type = 'Lock' "
                "AND query LIKE 'COPY telemetry_gpusample %%'").fetchone()[0]
            if waiting:
                break
            time.sleep(0.05)
        assert waiting, "the worker's COPY never waited on the other writer's row"
        other.commit()
        worker.join(timeout=30)
    assert result == [4]
    assert GpuSample.objects.count() == 5
    assert IngestBatch.objects.get(id=batch_id).inserted == 4
    # The worker folded only its own 4 samples: the other writer's went in without a rollup.
    assert GpuMinute.objects.aggregate(n=Sum("samples"))["n"] == 4
