"""JSON API of the workloads app, mounted on /api/v1/ by greenops/api/v1.py."""

from ninja import Router

router = Router(tags=["workloads"])
