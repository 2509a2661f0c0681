"""Group commit (the worker stores every pending batch it can claim in one transaction, one COPY
and one INSERT) keeps the single-batch guarantees: every sample stored once, a replay credited
nothing, per-batch `inserted` counts exact, rollups equal sums of raw samples, a batch that can
no longer be stored fails alone, and a batch whose group already stored it is a no-op."""

from __future__ import annotations

import time
import uuid

import pytest
import redis
from django.db import connection
from django.db.models import Sum

from greenops.telemetry import ingest
from greenops.telemetry.models import Gpu, GpuDay, GpuHour, GpuMinute, GpuSample, IngestBatch
from tests.support.agent_fakes import free_port
from tests.support.factories import gz, make_batch, make_host
from tests.support.telemetry import record_publishes

pytestmark = pytest.mark.skipif(connection.vendor != "postgresql",
                                reason="group commit is the PostgreSQL path")


def pend(host, doc) -> str:
    n = len(doc["samples"]["ts"])
    IngestBatch.objects.create(id=doc["batch_id"], host=host, n_samples=n, payload=gz(doc),
                               gzip_encoded=True)
    return doc["batch_id"]


@pytest.mark.django_db(transaction=True)  # as in the worker: no surrounding test transaction
def test_one_task_stores_every_pending_batch_once(team):
    host, _ = make_host(team, name="group", gpus=2)
    other, _ = make_host(team, name="group-2", gpus=1)
    t0 = float(int(time.time()) - 600)
    a = make_batch(n_per_gpu=5, start=t0)  # 5 s x 2 GPUs = 10 new samples
    replay = dict(a, batch_id=make_batch()["batch_id"])  # A's samples under a new id: 0 new
    # 5 per GPU from t0+3: t0+3 and t0+4 are A's, t0+5..t0+7 new => 3 x 2 GPUs = 6 new.
    overlap = make_batch(n_per_gpu=5, start=t0 + 3)
    c = make_batch(n_per_gpu=4, gpus=(0,), start=t0)  # another host: 4 new
    ids = [pend(host, a), pend(host, replay), pend(host, overlap), pend(other, c)]

    assert ingest.process_pending(ids[2]) == 6  # its own batch's count comes back

    credited = dict(IngestBatch.objects.values_list("id", "inserted"))
    assert [credited[uuid.UUID(i)] for i in ids] == [10, 0, 6, 4]
    assert set(IngestBatch.objects.values_list("status", flat=True)) == {"done"}
    assert GpuSample.objects.count() == 10 + 6 + 4 == 20
    # Rollups saw each stored sample once: 20 samples, and per-minute sums equal raw sums.
    assert GpuMinute.objects.aggregate(s=Sum("samples"))["s"] == 20
    raw_energy = GpuSample.objects.aggregate(e=Sum("energy_j"))["e"]
    assert GpuMinute.objects.aggregate(e=Sum("energy_j"))["e"] == pytest.approx(raw_energy)
    # The other batches' messages arrive later: their group stored them, nothing to do.
    for batch_id in ids:
        assert ingest.process_pending(batch_id) is None
    assert GpuSample.objects.count() == 20


@pytest.mark.django_db(transaction=True)
def test_a_batch_that_cannot_be_stored_fails_alone(team):
    host, _ = make_host(team, name="group-fail", gpus=2)
    t0 = float(int(time.time()) - 600)
    good = pend(host, make_batch(n_per_gpu=3, gpus=(0,), start=t0))
    gone = pend(host, make_batch(n_per_gpu=3, gpus=(1,), start=t0))
    Gpu.objects.filter(host=host, index=1).delete()  # removed between acceptance and storage

    assert ingest.process_pending(gone) == 0
    rows = {str(b.id): b for b in IngestBatch.objects.all()}
    assert (rows[good].status, rows[good].inserted) == ("done", 3)
    assert rows[gone].status == "failed" and "GPU 1 is not registered" in rows[gone].error
    assert GpuSample.objects.count() == 3


def test_one_queued_store_task_covers_the_batches_committed_meanwhile(settings, monkeypatch):
    """With a real broker, a batch committed while a store task is queued (not yet claiming)
    sends no message of its own: that task claims it. Once the task starts claiming, the next
    batch queues a new one; with Redis unreachable every batch is published as before."""
    from greenops.telemetry import tasks

    published = record_publishes(settings, monkeypatch)
    ingest._redis().delete(ingest.KICK_KEY)
    ingest._kick(tasks.store_batch, "a")
    ingest._kick(tasks.store_batch, "b")  # "a"'s task is still queued: it will take "b" too
    assert published == ["a"]
    ingest._unkick()  # the worker starts claiming
    ingest._kick(tasks.store_batch, "c")
    assert published == ["a", "c"]
    assert 0 < ingest._redis().ttl(ingest.KICK_KEY) <= ingest.KICK_TTL_S  # a lost task delays only
    ingest._redis().delete(ingest.KICK_KEY)

    # Redis unreachable: this thread's key connection points at a port nobody listens on.
    dead = redis.Redis(port=free_port(), socket_connect_timeout=0.2).connection_pool
    monkeypatch.setattr(ingest._kick_connections, "conn", dead.make_connection(), raising=False)
    ingest._kick(tasks.store_batch, "d")
    ingest._kick(tasks.store_batch, "e")
    assert published == ["a", "c", "d", "e"]


@pytest.mark.django_db(transaction=True)
def test_batches_another_worker_holds_are_passed_over_for_the_next(team, monkeypatch):
    """Two worker processes share a backlog: while one holds the head of the queue, the other
    claims the batches after it (the claim once sized its group over the held rows and came back
    empty, so one process stored every big batch alone)."""
    import psycopg

    monkeypatch.setattr(ingest, "GROUP_MAX_SAMPLES", 20)  # two of these 10-sample batches
    host, _ = make_host(team, name="shared", gpus=2)
    t0 = float(int(time.time()) - 600)
    ids = [pend(host, make_batch(n_per_gpu=5, start=t0 + 5 * i)) for i in range(6)]
    params = {k: v for k, v in connection.get_connection_params().items()
              if k != "cursor_factory"}
    with psycopg.connect(**params) as other:  # "the other worker" holds the first two
        other.execute("SELECT id FROM telemetry_ingestbatch WHERE id = ANY(%s) FOR UPDATE",
                      ([uuid.UUID(i) for i in ids[:2]],))
        assert ingest.process_pending(str(uuid.uuid4())) is None  # e.g. a beat catch-up run
        other.rollback()
    status = dict(IngestBatch.objects.values_list("id", "status"))
    assert [status[uuid.UUID(i)] for i in ids] == ["pending"] * 2 + ["done"] * 4
    assert GpuSample.objects.count() == 4 * 10


@pytest.mark.django_db(transaction=True)
def test_a_draining_task_stores_batches_that_arrive_meanwhile(team, settings, monkeypatch):
    """While a store task is storing, the Redis key stays set so new batches queue no task; the
    task takes them, and it clears the key before its last claim, so none is left behind."""
    from greenops.telemetry import tasks

    published = record_publishes(settings, monkeypatch)
    host, _ = make_host(team, name="drain", gpus=2)
    t0 = float(int(time.time()) - 600)
    first = pend(host, make_batch(n_per_gpu=5, start=t0))
    arrivals = [make_batch(n_per_gpu=5, start=t0 + 5 * (i + 1)) for i in range(3)]
    key_seen: list[bool] = []
    real_store_group = ingest._store_group

    def store_group_while_agents_post(mine):
        result = real_store_group(mine)
        key_seen.append(bool(ingest._redis().exists(ingest.KICK_KEY)))
        if arrivals:  # a request commits a batch, sees the key and queues nothing
            doc = arrivals.pop(0)
            pend(host, doc)
            ingest._kick(tasks.store_batch, doc["batch_id"])
        return result

    monkeypatch.setattr(ingest, "_store_group", store_group_while_agents_post)
    ingest._redis().set(ingest.KICK_KEY, first, ex=ingest.KICK_TTL_S)  # as the web left it
    assert ingest.process_pending(first) == 10
    assert published == []  # every arrival was covered by the running task
    assert set(IngestBatch.objects.values_list("status", flat=True)) == {"done"}
    assert GpuSample.objects.count() == 4 * 10
    assert key_seen[:3] == [True, True, True] and not ingest._redis().exists(ingest.KICK_KEY)


@pytest.mark.django_db(transaction=True)
def test_a_group_of_new_samples_credits_each_batch_and_folds_hours_from_minutes(team):
    """Every staged sample new: each batch is credited all its samples without the crediting
    join, and the hour and day rollups, folded from the group's minutes, equal the samples'
    own sums, maxima and minute counts -- two minutes an hour, an hour boundary inside a batch."""
    host, _ = make_host(team, name="group-hours", gpus=2)
    now = int(time.time())
    h = now // 3600 * 3600
    if now - h < 120:  # the samples below must all lie in the past
        h -= 3600
    util = {0: [90.0, 80.0, 70.0, 60.0, 50.0, 40.0], 1: [3.0, 2.0, 4.0, 1.0, 2.0, 3.0]}
    power = {0: [300.0, 310.0, 290.0, 305.0, 295.0, 280.0],
             1: [60.0, 61.0, 62.0, 59.0, 58.0, 57.0]}
    ids = []
    for k in range(3):  # samples every 30 s from h-90 to h+60, two per GPU per batch
        doc = make_batch(n_per_gpu=2, start=float(h - 90 + 60 * k), step=30.0)
        cols = doc["samples"]
        cols["util_pct"] = [util[g][2 * k + i] for g in (0, 1) for i in range(2)]
        cols["power_w"] = [power[g][2 * k + i] for g in (0, 1) for i in range(2)]
        ids.append(pend(host, doc))

    assert ingest.process_pending(ids[0]) == 4
    credited = dict(IngestBatch.objects.values_list("id", "inserted"))
    assert [credited[uuid.UUID(i)] for i in ids] == [4, 4, 4]

    gpu = {g.index: g.id for g in Gpu.objects.filter(host=host)}
    hour = {(r.gpu_id, int(r.bucket.timestamp())): r for r in GpuHour.objects.all()}
    # Hour before h: h-90 (minute h-120) and h-60, h-30 (minute h-60); batch 2 crosses into
    # hour h: h, h+30 (minute h) and h+60 (minute h+60). Two minutes per hour, so an hour's
    # maximum is the max of its minutes' maxima, not their sum. GPU 1's minutes average 3, 3,
    # 1.5 and 3 %: all idle (< 5 %).
    want = {(0, h - 3600): (3, 240.0, 90.0, 310.0, 2, 0), (0, h): (3, 150.0, 60.0, 305.0, 2, 0),
            (1, h - 3600): (3, 9.0, 4.0, 62.0, 2, 2), (1, h): (3, 6.0, 3.0, 59.0, 2, 2)}
    for (index, bucket), figures in want.items():
        r = hour[(gpu[index], bucket)]
        assert (r.samples, r.util_sum, r.util_max, r.power_max_w, r.util_minutes,
                r.idle_minutes) == figures
        assert r.util_n == r.power_n == 3
        assert r.power_sum_w == sum(power[index][:3] if bucket < h else power[index][3:])
    days = {(r.gpu_id, int(r.bucket.timestamp())): r for r in GpuDay.objects.all()}
    if h % 86400:  # both hours in one day: the day holds all six samples and both minutes
        want_day = {0: (6, 390.0, 90.0, 310.0, 4, 0), 1: (6, 15.0, 4.0, 62.0, 4, 4)}
        for index, figures in want_day.items():
            r = days[(gpu[index], h // 86400 * 86400)]
            assert (r.samples, r.util_sum, r.util_max, r.power_max_w, r.util_minutes,
                    r.idle_minutes) == figures
    else:  # h is midnight: the day before holds the first hour's figures, today the second's
        for (index, bucket), figures in want.items():
            r = days[(gpu[index], bucket // 86400 * 86400)]
            assert (r.samples, r.util_sum, r.util_max, r.power_max_w, r.util_minutes,
                    r.idle_minutes) == figures


@pytest.mark.django_db(transaction=True)
@pytest.mark.parametrize("wait_s", [0.05, 0.0])
def test_a_draining_task_waits_so_arrivals_share_one_group(team, settings, monkeypatch, wait_s):
    """Group commit's wait: after a group that did not fill, a draining task waits
    INGEST_GROUP_WAIT_S, so three batches committed meanwhile are stored by one transaction
    instead of one each. With the wait at 0 it claims again at once (and finds them one by one
    here, as they arrive between its claims)."""
    from greenops.telemetry import tasks

    if not settings.REDIS_URL:
        pytest.skip("needs Redis")
    settings.CELERY_TASK_ALWAYS_EAGER = False
    settings.INGEST_GROUP_WAIT_S = wait_s
    monkeypatch.setattr(tasks.store_batch, "apply_async", lambda args, **kw: None)
    host, _ = make_host(team, name="gather", gpus=2)
    t0 = float(int(time.time()) - 600)
    first = pend(host, make_batch(n_per_gpu=5, start=t0))
    arrivals = [make_batch(n_per_gpu=5, start=t0 + 5 * (i + 1)) for i in range(3)]
    waits: list[float] = []
    claims: list[int] = []
    real_store_group = ingest._store_group

    def arrive() -> None:
        if arrivals:
            pend(host, arrivals.pop(0))

    def sleep(seconds: float) -> None:  # the agents' requests land while the task waits
        waits.append(seconds)
        while arrivals:
            arrive()

    def store_group(mine):
        result = real_store_group(mine)
        claims.append(result[1])
        if not wait_s:
            arrive()  # no wait: one batch lands between two claims
        return result

    monkeypatch.setattr(ingest.time, "sleep", sleep)
    monkeypatch.setattr(ingest, "_store_group", store_group)
    ingest._redis().set(ingest.KICK_KEY, first, ex=ingest.KICK_TTL_S)
    assert ingest.process_pending(first) == 10
    assert GpuSample.objects.count() == 4 * 10
    if wait_s:
        assert waits[0] == 0.05 and claims[:2] == [1, 3]
    else:
        assert waits == [] and claims[:4] == [1, 1, 1, 1]


@pytest.mark.django_db(transaction=True)
def test_a_group_of_late_batches_marks_their_hours_in_one_query_for_teams(
        team, other_team, django_assert_max_num_queries):
    """An agent draining its spool sends late batch after batch: each late hour of each team is
    marked once, live batches and replays mark nothing, and the marks cost one INSERT for the
    whole group (the teams come with the group's GPUs), not two queries per batch."""
    from greenops.telemetry import late
    from greenops.telemetry.models import LateHour
    from greenops.windows import floor_hour

    host, _ = make_host(team, name="drain", gpus=1)
    far, _ = make_host(other_team, name="drain-far", gpus=1)
    now = time.time()
    old = float(int(now) // 3600 * 3600 - 6 * 3600)  # the start of an hour, 6 h back: late
    ids = [pend(host, make_batch(n_per_gpu=3, gpus=(0,), start=old + 60 * k)) for k in range(5)]
    ids.append(pend(host, make_batch(n_per_gpu=3, gpus=(0,), start=old + 3600)))  # next hour
    replay = make_batch(n_per_gpu=3, gpus=(0,), start=old)
    ids.append(pend(host, replay))  # the first batch's samples again: adds none, marks none
    ids.append(pend(far, make_batch(n_per_gpu=3, gpus=(0,), start=old)))  # another team
    ids.append(pend(host, make_batch(n_per_gpu=3, gpus=(0,), start=now - 30)))  # live

    with django_assert_max_num_queries(40) as ctx:  # the drain claims again after
        ingest.process_pending(ids[0])
    sqls = [q["sql"] or "" for q in ctx.captured_queries]  # None: a prepared statement
    assert sum("telemetry_host" in sql for sql in sqls) == 0  # no query for the teams
    assert sum("telemetry_latehour" in sql for sql in sqls) == 1

    first = floor_hour(ingest._from_us(int(old * 1e6)))
    assert set(LateHour.objects.values_list("team_id", "hour")) == {
        (team.id, first), (team.id, first + late.HOUR), (other_team.id, first)}
    assert GpuSample.objects.count() == 3 * 8


@pytest.mark.django_db(transaction=True)
def test_the_worker_statements_are_prepared_once_per_connection(team):
    """Planning the group statement cost 3 ms a group: the claim, the rollups' fold (the
    samples go in by COPY) and the status update run as prepared statements, planned once per
    connection."""
    host, _ = make_host(team, name="prepared", gpus=1)
    t0 = float(int(time.time()) - 600)

    def runs() -> dict[str, int]:
        with connection.cursor() as cursor:
            cursor.execute("SELECT statement, generic_plans + custom_plans "
                           "FROM pg_prepared_statements")
            return dict(cursor.fetchall())

    before = runs()
    for k in range(2):
        ingest.process_pending(pend(host, make_batch(n_per_gpu=3, gpus=(0,), start=t0 + 10 * k)))
    after = runs()
    for marker in ("DELETE FROM gpuminute_fold_stage", "FOR UPDATE SKIP LOCKED",
                   "UPDATE telemetry_ingestbatch AS b SET status = 'done'"):
        assert any(n > before.get(s, 0) for s, n in after.items() if marker in s), marker
    assert GpuSample.objects.count() == 6


@pytest.mark.django_db(transaction=True)
def test_a_column_no_batch_of_the_group_sent_is_stored_null(team):
    """The group's COPY leaves out columns null in every row (store.store_group): they must be
    stored null -- not a default -- beside a column only some batches sent."""
    host, _ = make_host(team, name="narrow", gpus=1)
    t0 = float(int(time.time()) - 600)
    sent = make_batch(n_per_gpu=2, gpus=(0,), start=t0)
    sent["samples"]["mem_util_pct"] = [41.5, None]
    sent["samples"]["throttle_reasons"] = [4, 0]
    ids = [pend(host, sent), pend(host, make_batch(n_per_gpu=2, gpus=(0,), start=t0 + 2))]
    assert ingest.process_pending(ids[0]) == 2
    rows = list(GpuSample.objects.order_by("ts").values_list(
        "mem_util_pct", "throttle_reasons", "nvlink_tx_kib_s", "energy_j"))
    assert rows == [(41.5, 4, None, None), (None, 0, None, 200.0),  # energy_j: null at i == 0
                    (None, None, None, None), (None, None, None, 200.0)]
    # Nothing in the samples table may default to a value, or a left-out column would get it.
    with connection.cursor() as cursor:
        cursor.execute("SELECT column_name FROM information_schema.columns WHERE table_name = "
                       "'telemetry_gpusample' AND column_default IS NOT NULL")
        assert cursor.fetchall() == []


@pytest.mark.django_db(transaction=True)
def test_a_body_the_join_cannot_convert_fails_alone_and_its_group_is_stored(team):
    """A stored body the API would have refused (written by hand: an energy counter of 3.5)
    sends its group back to being read batch by batch: it fails with the full check's message,
    the others are stored as ever."""
    host, _ = make_host(team, name="odd", gpus=1)
    t0 = float(int(time.time()) - 600)
    good = [make_batch(n_per_gpu=2, gpus=(0,), start=t0 + 2 * k) for k in range(3)]
    odd = make_batch(n_per_gpu=2, gpus=(0,), start=t0 + 10)
    odd["samples"]["energy_mj"] = [3.5, 4.5]
    ids = [pend(host, good[0]), pend(host, odd), pend(host, good[1]), pend(host, good[2])]
    ingest.process_pending(ids[0])
    rows = {str(b.id): b for b in IngestBatch.objects.all()}
    assert [rows[i].status for i in ids] == ["done", "failed", "done", "done"]
    assert rows[ids[1]].error == "must be an integer or null, got float"  # the full check's
    assert GpuSample.objects.count() == 6
