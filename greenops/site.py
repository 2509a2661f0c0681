"""The server's public base URL, for links that leave the browser (emails, install commands)."""

from __future__ import annotations

from django.conf import settings
from django.http import HttpRequest

FALLBACK = "http://127.0.0.1:8000"


def site_url(request: HttpRequest | None = None) -> str:
    """SITE_URL when configured (production: the address people and hosts really use);
    otherwise the address this request came in on, which is right for a demo on any port."""
    if settings.SITE_URL:
        return settings.SITE_URL.rstrip("/")
    if request is not None:
        return request.build_absolute_uri("/").rstrip("/")
    return FALLBACK
