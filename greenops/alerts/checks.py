"""System checks of the alerts app (`manage.py check`)."""

from __future__ import annotations

from django.conf import settings
from django.core.checks import Warning as CheckWarning
from django.db import DatabaseError


def links(app_configs=None, **kwargs) -> list[CheckWarning]:
    """Links in notifications need a base: SITE_URL, else the address the admin used when
    saving each channel. Warn when a channel has neither (its messages carry bare paths)."""
    if settings.SITE_URL:
        return []
    from greenops.alerts.models import Channel

    try:
        bare = list(Channel.objects.filter(site_url="").values_list("name", flat=True)[:5])
    except DatabaseError:  # no database yet (before migrate): only the setting can be judged
        bare = ["(unknown: the database cannot be read)"]
    if not bare:
        return []
    return [CheckWarning(
        "SITE_URL is unset and alert channels have no saved address, so their messages "
        "carry bare paths (/teams/...) a receiver cannot open: " + ", ".join(bare),
        hint="Set SITE_URL to the public address, e.g. https://greenops.example.com, or "
             "save the channels again from the page.",
        id="alerts.W001")]
