"""A worker whose database connection died recovers on its next task.

The connection is killed from the server side (pg_terminate_backend), as a PostgreSQL restart
does; the next query fails once, and the task_prerun hook must then drop the connection so the
following task reconnects instead of failing until Celery's reuse limit."""

from __future__ import annotations

import pytest
from celery.signals import task_prerun
from django.db import OperationalError, connection

from greenops.celery import app
from tests.support.postgres import drop_backend


@app.task(name="tests.noop")
def noop() -> None:
    return None


@pytest.mark.django_db(transaction=True)
def test_next_task_reconnects_after_the_server_dropped_the_connection():
    with connection.cursor() as cursor:
        cursor.execute("SELECT pg_backend_pid()")
        pid = cursor.fetchone()[0]
    drop_backend(pid)

    with pytest.raises(OperationalError), connection.cursor() as cursor:
        cursor.execute("SELECT 1")  # the failing task: raised outside any transaction

    # Between tasks the worker sends task_prerun; the broken connection must be dropped there.
    task_prerun.send(sender=noop, task_id="t-1", task=noop, args=(), kwargs={})
    with connection.cursor() as cursor:
        cursor.execute("SELECT 1")
        assert cursor.fetchone() == (1,)
        cursor.execute("SELECT pg_backend_pid()")
        assert cursor.fetchone()[0] != pid
