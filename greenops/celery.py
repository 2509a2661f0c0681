"""Celery app. Without REDIS_URL, tasks run eagerly in the web process (embedded default)."""

import os

from celery import Celery
from celery.signals import task_postrun, task_prerun
from django.db import connections

from greenops import db_router

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "greenops.settings")

app = Celery("greenops")
app.config_from_object("django.conf:settings", namespace="CELERY")
app.autodiscover_tasks()


@task_prerun.connect
@task_postrun.connect
def drop_broken_db_connections(task=None, **_kwargs) -> None:
    """Close a database connection that failed, before and after each task.

    Django does this at the start and end of each web request; in a worker Celery's fixup only
    does it every CELERY_DB_REUSE_MAX tasks. After PostgreSQL restarted, a pool process kept
    its dead connection and failed every task until then. An error raised outside a transaction
    marks the connection (errors_occurred), and close_if_unusable_or_obsolete closes it only if
    it no longer answers. Eager tasks run inside the caller's request and transaction: leave
    those alone.
    """
    if task is not None and getattr(task.request, "is_eager", False):
        return
    for conn in connections.all(initialized_only=True):
        if not conn.in_atomic_block:
            conn.close_if_unusable_or_obsolete()


@task_prerun.connect
def reads_on_primary(task_id=None, **_kwargs) -> None:
    """A task reads the primary (greenops/db_router.py), even run eagerly inside a page request
    that reads the replica; report generation opts in for its figures itself."""
    db_router.task_started(task_id)


@task_postrun.connect
def reads_as_before(task_id=None, **_kwargs) -> None:
    db_router.task_finished(task_id)


def prepare_publishing() -> None:
    """Do now what a process's first publish would: finalise the app (bind every task), build
    the AMQP router and import the broker's transport -- no network. A web process published
    its first store task from an agent's POST: 30-48 ms of CPU (thread CPU time inside the
    server, bench/ingest at 80 samples per POST), paid by each of its threads that published
    before the first had finished, and by the first request of every web restart. Without a
    broker (the embedded default runs tasks in-process) there is nothing to prepare. The task
    routes and default queue are read here, once, as Celery reads them at its first publish: a
    process that changes them afterwards rebuilds both caches (a test's web does:
    tests/support/celery_worker.use_queues)."""
    if app.conf.task_always_eager or not app.conf.broker_url:
        return
    app.finalize(auto=True)
    app.amqp.router  # noqa: B018 (built on first use)
    app.amqp.send_task_message  # noqa: B018 (the sender, and its disabled event dispatcher)
    connection = app.connection_for_write()
    try:
        connection.transport  # noqa: B018 (imports and makes the transport; connects nothing)
    finally:
        connection.release()
