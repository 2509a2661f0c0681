"""Pages of the workloads app, mounted under /teams/<slug>/ by greenops/urls.py."""

from django.urls import path  # noqa: F401

urlpatterns: list = []
