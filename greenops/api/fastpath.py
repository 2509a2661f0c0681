"""POST /api/v1/samples without the middleware that browser pages need.

Every agent posts a batch every few seconds, so this one endpoint is nearly all of a fleet's
requests. It authenticates with the host's bearer token and keeps no session, cookie or CSRF
state, yet it went through static files, sessions, CSRF, authentication, messages, frame options
and the URL resolver: about a third of the web process's CPU per request at the agent's batch
size (profiled with bench/ingest at 80 samples per POST). This middleware sits right after
SecurityMiddleware, whose HTTPS redirect and headers still apply, and hands that one request
straight to its view; every other request goes through the whole stack as before.
"""

from __future__ import annotations

from django.http import HttpRequest, HttpResponse
from django.urls import resolve

SAMPLES_PATH = "/api/v1/samples"


class SamplesFastPath:
    def __init__(self, get_response) -> None:
        self.get_response = get_response
        self._match = None  # resolved on first use, when the URLconf is loaded

    def __call__(self, request: HttpRequest) -> HttpResponse:
        if request.method != "POST" or request.path_info != SAMPLES_PATH:
            return self.get_response(request)
        if self._match is None:
            self._match = resolve(SAMPLES_PATH)
        request.resolver_match = self._match
        response = self._match.func(request, *self._match.args, **self._match.kwargs)
        if not response.streaming and not response.has_header("Content-Length"):
            # What CommonMiddleware would add: a client can then keep its connection.
            response.headers["Content-Length"] = str(len(response.content))
        return response
