import logging
import secrets
import sys

from django.contrib import admin
from django.contrib.auth import views as auth_views
from django.db import InterfaceError, OperationalError
from django.http import HttpRequest, HttpResponse, HttpResponseServerError
from django.template import loader
from django.urls import include, path
from django.views.decorators.csrf import requires_csrf_token

from dashboards.methodology import methodology
from greenops.alerts import views as alert_views
from greenops.api.v1 import api
from greenops.carbon.codecarbon_api import api as codecarbon_api
from greenops.login import LoginView

urlpatterns = [
    path("admin/", admin.site.urls),
    path("login/", LoginView.as_view(), name="login"),
    path("logout/", auth_views.LogoutView.as_view(), name="logout"),
    path("api/v1/", api.urls),
    path("api/codecarbon/", codecarbon_api.urls),  # codecarbon's api_endpoint
    path("methodology/", methodology, name="carbon-methodology"),
    path("alerts/confirm/<str:token>/", alert_views.confirm_email, name="alert-email-confirm"),
    path("teams/<slug:slug>/", include("greenops.workloads.urls")),
    path("teams/<slug:slug>/", include("greenops.kpis.urls")),
    path("teams/<slug:slug>/", include("greenops.costs.urls")),
    path("teams/<slug:slug>/", include("greenops.carbon.urls")),
    path("teams/<slug:slug>/", include("greenops.alerts.urls")),
    path("teams/<slug:slug>/", include("greenops.reports.urls")),
    path("teams/<slug:slug>/", include("greenops.benchmarks.urls")),
    path("teams/<slug:slug>/", include("greenops.advisor.urls")),
    path("teams/<slug:slug>/", include("greenops.teams.urls")),
    path("teams/<slug:slug>/", include("greenops.telemetry.urls")),
    path("", include("greenops.teams.urls_site")),
    path("", include("greenops.telemetry.urls_site")),
    path("", include("dashboards.urls")),
]


log = logging.getLogger("greenops.errors")
DATABASE_RETRY_AFTER_S = 5  # as the API's 503 when PostgreSQL is down (greenops/api)


@requires_csrf_token
def server_error(request: HttpRequest) -> HttpResponse:
    """The 500 page: styled, with a reference the user can quote, written to the log beside the
    traceback. Rendered without the request's context processors (they read the database, which
    may be what failed) and with nothing that can fail in turn.

    When what failed is the database connection itself (PostgreSQL stopped or unreachable), the
    answer is a 503 with Retry-After that says so, as the API answers: the site is not broken,
    a part is down, and the same request will work once it is back."""
    reference = secrets.token_hex(4)
    exc = sys.exc_info()[1]
    if isinstance(exc, (OperationalError, InterfaceError)):
        log.warning("503 reference %s for %s %s: database unreachable: %s", reference,
                    request.method, request.path, exc)
        body = _bare_page("503_database.html", "Database unreachable", reference,
                          retry_after_s=DATABASE_RETRY_AFTER_S)
        response = HttpResponse(body, status=503)
        response["Retry-After"] = str(DATABASE_RETRY_AFTER_S)
        return response
    log.error("500 reference %s for %s %s", reference, request.method, request.path, exc_info=True)
    return HttpResponseServerError(_bare_page("500.html", "Server error", reference))


def _bare_page(template: str, title: str, reference: str, **context) -> str:
    """An error page rendered without a request or the database; a bare line if even the
    template fails (a broken template must not turn the error page into a crash)."""
    try:
        return loader.get_template(template).render({"reference": reference, **context})
    except Exception:
        return f"<h1>{title}</h1><p>Reference {reference}</p>"


handler500 = server_error
