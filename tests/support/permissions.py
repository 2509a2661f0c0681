"""Permission-matrix helpers: the roles in order and every URL pattern of a resolver."""

from __future__ import annotations

from django.urls import URLPattern, URLResolver

ROLES = ["owner", "admin", "member", "viewer", "outsider"]


def _patterns(resolver) -> list[URLPattern]:
    out = []
    for p in resolver:
        out += _patterns(p.url_patterns) if isinstance(p, URLResolver) else [p]
    return out
