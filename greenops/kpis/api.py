"""JSON API of the kpis app, mounted on /api/v1/ by greenops/api/v1.py."""

from ninja import Router

router = Router(tags=["kpis"])
