import logging
import secrets

from django.contrib import admin
from django.contrib.auth import views as auth_views
from django.http import HttpRequest, HttpResponseServerError
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


@requires_csrf_token
def server_error(request: HttpRequest) -> HttpResponseServerError:
    """The 500 page: styled, with a reference the user can quote, written to the log beside the
    traceback. Rendered without the request's context processors (they read the database, which
    may be what failed) and with nothing that can fail in turn."""
    reference = secrets.token_hex(4)
    log.error("500 reference %s for %s %s", reference, request.method, request.path, exc_info=True)
    try:
        body = loader.get_template("500.html").render({"reference": reference})
    except Exception:  # a broken template must not turn the 500 into a crash
        body = f"<h1>Server error</h1><p>Reference {reference}</p>"
    return HttpResponseServerError(body)


handler500 = server_error
