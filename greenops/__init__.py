"""GreenOps server: Django project, Celery app and the domain apps."""

from greenops.celery import app as celery_app

__all__ = ["celery_app"]
