"""Beat tasks: every scheduled task has soft and hard time limits from settings, and a run that
starts while the previous run of the same task still works skips instead of racing it."""

from __future__ import annotations

import threading

import pytest
from django.conf import settings
from django.core.cache import cache

from greenops import beat
from greenops.celery import app


@pytest.fixture(autouse=True)
def _clear_locks():
    for name in settings.BEAT_TASK_TIME_LIMITS_S:
        cache.delete(beat.lock_key(name))
    yield
    for name in settings.BEAT_TASK_TIME_LIMITS_S:
        cache.delete(beat.lock_key(name))


def test_every_beat_task_has_a_soft_and_a_hard_time_limit_and_the_lock():
    app.loader.import_default_modules()
    scheduled = {entry["task"] for entry in settings.CELERY_BEAT_SCHEDULE.values()}
    # Queued by a page, not by beat: time-limited like beat's tasks, and kept to one queued
    # refresh per team by a cache mark (dashboards.tasks.request_refresh), not by the lock.
    on_demand = {"dashboards.tasks.refresh_team_home"}
    assert scheduled | on_demand == set(settings.BEAT_TASK_TIME_LIMITS_S)
    for name in on_demand:
        soft_s, hard_s = settings.BEAT_TASK_TIME_LIMITS_S[name]
        assert (app.tasks[name].soft_time_limit, app.tasks[name].time_limit) == (soft_s, hard_s)
    for name in scheduled:
        task = app.tasks[name]
        soft_s, hard_s = settings.BEAT_TASK_TIME_LIMITS_S[name]
        assert (task.soft_time_limit, task.time_limit) == (soft_s, hard_s), name
        assert 0 < soft_s < hard_s, name
        # The lock outlives a run killed at the hard limit, and no longer.
        assert beat.lock_ttl_s(name) == hard_s + beat.LOCK_MARGIN_S
        assert task.run.__wrapped__, f"{name} is not wrapped in single_flight"


def test_an_overlapping_run_skips_and_the_next_one_runs(monkeypatch):
    from greenops.kpis import rollup, tasks

    inside, release = threading.Event(), threading.Event()
    calls: list[int] = []

    def slow_run(lookback_h):
        calls.append(lookback_h)
        inside.set()
        assert release.wait(10)
        return {"buckets": lookback_h}

    monkeypatch.setattr(rollup, "run", slow_run)
    results = {}
    first = threading.Thread(target=lambda: results.setdefault("first", tasks.rollup_kpis(1)))
    first.start()
    assert inside.wait(10)
    # A second beat tick while the first run still works: skipped, the rollup not entered.
    assert tasks.rollup_kpis(2) is None
    release.set()
    first.join(10)
    assert results["first"] == {"buckets": 1}
    assert calls == [1]
    # The lock went with the first run: the next tick runs.
    release.set()
    assert tasks.rollup_kpis(3) == {"buckets": 3}
    assert calls == [1, 3]


def test_a_lock_left_by_a_killed_run_expires_and_is_not_released_by_another(monkeypatch):
    from greenops.alerts import tasks

    name = "greenops.alerts.tasks.prune_values"
    # A worker SIGKILLed mid-run leaves its lock behind, with the TTL it was taken with.
    cache.set(beat.lock_key(name), "killed-run", timeout=beat.lock_ttl_s(name))
    assert tasks.prune_values() is None
    assert cache.get(beat.lock_key(name)) == "killed-run"  # a skipped run leaves it alone
    cache.delete(beat.lock_key(name))  # what the TTL does after hard limit + margin


@pytest.mark.django_db
def test_a_run_that_fails_releases_the_lock(monkeypatch):
    from greenops.telemetry import ingest, tasks

    def broken(*_a, **_k):
        raise RuntimeError("database went away")

    monkeypatch.setattr(ingest, "pending_batch_ids", broken)
    with pytest.raises(RuntimeError):
        tasks.process_pending_batches()
    monkeypatch.undo()
    assert tasks.process_pending_batches() == 0
