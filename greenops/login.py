"""The login view and its limits (issue 30): django-axes counts failed logins in PostgreSQL --
so the limits hold while Redis is down -- per client address and per username, each locking
after RATELIMIT_LOGIN_FAILURES failures for RATELIMIT_WINDOW_S; a password sprayed over many
usernames from one address is stopped by the address count, one username tried from many
addresses by the username count. Above both, a global rate: past
RATELIMIT_LOGIN_GLOBAL_PER_MIN failed logins in the last minute, site-wide, every login waits
a minute (a spray from many addresses over many usernames). Each refusal is the login page
with 429 and Retry-After."""

from __future__ import annotations

import datetime as dt

from axes.models import AccessFailureLog
from django.conf import settings
from django.contrib.auth import views as auth_views
from django.contrib.auth.forms import AuthenticationForm
from django.http import HttpRequest, HttpResponse
from django.shortcuts import render
from django.utils import timezone

from greenops import ratelimit

GLOBAL_WINDOW_S = 60


def failure_limit(request: HttpRequest | None = None, credentials: dict | None = None) -> int:
    """AXES_FAILURE_LIMIT: read per request, so a test or an operator may change it."""
    return settings.RATELIMIT_LOGIN_FAILURES


def cool_off(request: HttpRequest | None = None) -> dt.timedelta:
    """AXES_COOLOFF_TIME: the limit's window."""
    return dt.timedelta(seconds=settings.RATELIMIT_WINDOW_S)


def client_ip(request: HttpRequest) -> str:
    """AXES_CLIENT_IP_CALLABLE: REMOTE_ADDR only, as every other limit (ratelimit.client_ip)."""
    return ratelimit.client_ip(request)


def _refused(request: HttpRequest, wait_s: int, form=None, next_url: str = "") -> HttpResponse:
    response = render(request, "registration/login.html",
                      {"form": form or AuthenticationForm(request), "locked_for_s": wait_s,
                       "locked_for_min": -(-wait_s // 60), "next": next_url}, status=429)
    response["Retry-After"] = str(wait_s)
    return response


def lockout(request: HttpRequest, credentials: dict | None = None, *args, **kwargs):
    """AXES_LOCKOUT_CALLABLE: the address or the username is over its limit."""
    return _refused(request, settings.RATELIMIT_WINDOW_S,
                    next_url=request.POST.get("next", "") if request.method == "POST" else "")


def global_failures(now: dt.datetime | None = None) -> int:
    """Failed logins site-wide in the last GLOBAL_WINDOW_S (axes' failure log)."""
    since = (now or timezone.now()) - dt.timedelta(seconds=GLOBAL_WINDOW_S)
    return AccessFailureLog.objects.filter(attempt_time__gte=since).count()


class LoginView(auth_views.LoginView):
    def post(self, request: HttpRequest, *args, **kwargs) -> HttpResponse:
        if (settings.RATELIMIT_ENABLED
                and global_failures() >= settings.RATELIMIT_LOGIN_GLOBAL_PER_MIN):
            return _refused(request, GLOBAL_WINDOW_S, self.get_form(), self.get_redirect_url())
        return super().post(request, *args, **kwargs)
