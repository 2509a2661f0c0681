"""Celery app. Without REDIS_URL, tasks run eagerly in the web process (embedded default)."""

import os

from celery import Celery

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "greenops.settings")

app = Celery("greenops")
app.config_from_object("django.conf:settings", namespace="CELERY")
app.autodiscover_tasks()
