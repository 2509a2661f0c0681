"""The embedded default's in-process beat runs the schedule and survives a failing task."""

from __future__ import annotations

import pytest

from greenops import embedded_beat


@pytest.mark.django_db
def test_runs_due_entries_and_survives_a_failing_task(settings, host, post_batch, monkeypatch):
    from tests.support.factories import make_batch

    _, token = host
    post_batch(token, make_batch(n_per_gpu=3))
    settings.CELERY_BEAT_SCHEDULE = {
        "ingest-catch-up": {"task": "greenops.telemetry.tasks.process_pending_batches",
                            "schedule": 60.0},
        "kpi-rollups": {"task": "greenops.kpis.tasks.rollup_kpis", "schedule": 300.0},
        "broken": {"task": "greenops.telemetry.tasks.prune_batches", "schedule": 60.0,
                   "kwargs": {"keep_days": "not a number"}},
    }
    errors: list[str] = []
    monkeypatch.setattr(embedded_beat.log, "error", lambda msg, name, *a, **kw: errors.append(name))
    next_run: dict[str, float] = {}
    ran = embedded_beat.run_due(next_run, now=1000.0)
    assert ran == ["ingest-catch-up", "kpi-rollups"]  # the broken one is logged, not raised
    assert errors == ["broken"]
    assert next_run == {"ingest-catch-up": 1060.0, "kpi-rollups": 1300.0, "broken": 1060.0}
    assert embedded_beat.run_due(next_run, now=1030.0) == []  # nothing due yet
    assert embedded_beat.run_due(next_run, now=1061.0) == ["ingest-catch-up"]
