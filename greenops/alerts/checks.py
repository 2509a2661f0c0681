"""System checks of the alerts app (`manage.py check`)."""

from __future__ import annotations

from django.conf import settings
from django.core.checks import Warning as CheckWarning

from greenops.alerts.models import Channel  # this module loads in AppConfig.ready()

HINT = ("Set SITE_URL to the public address, e.g. https://greenops.example.com, or save the "
        "channels again from the page.")


def links(app_configs=None, databases=None, **kwargs) -> list[CheckWarning]:
    """Links in notifications need a base: SITE_URL, else the address the admin used when
    saving each channel. Warn about the channels that have neither. The database may not be
    there yet when checks run (before migrate, a fresh install, a process whose database
    access is blocked): then there are no channels to judge."""
    if settings.SITE_URL:
        return []
    try:
        bare = list(Channel.objects.filter(site_url="").values_list("name", flat=True)[:5])
    except Exception:  # DatabaseError, or database access refused in this process
        return []
    if not bare:
        return []
    return [CheckWarning(
        "SITE_URL is unset and alert channels have no saved address, so their messages carry "
        "bare paths (/teams/...) a receiver cannot open: " + ", ".join(bare),
        hint=HINT, id="alerts.W001")]
