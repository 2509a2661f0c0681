"""The login view: Django's, with failed attempts limited per client address and username."""

from __future__ import annotations

from django.contrib.auth import views as auth_views
from django.http import HttpRequest, HttpResponse
from django.shortcuts import render

from greenops import ratelimit


def _ident(request: HttpRequest) -> str:
    username = (request.POST.get("username") or "").strip().lower()[:150]
    return f"{ratelimit.client_ip(request)}:{username}"


class LoginView(auth_views.LoginView):
    def post(self, request: HttpRequest, *args, **kwargs) -> HttpResponse:
        limit = ratelimit.login_limit()
        ident = _ident(request)
        wait = ratelimit.retry_after_s(limit, ident)
        if wait is not None:
            response = render(request, "registration/login.html",
                              {"form": self.get_form(), "locked_for_s": wait,
                               "locked_for_min": -(-wait // 60), "next": self.get_redirect_url()},
                              status=429)
            response["Retry-After"] = str(wait)
            return response
        response = super().post(request, *args, **kwargs)
        if response.status_code != 302:  # the form came back: wrong username or password
            ratelimit.record_failure(limit, ident)
        return response
