from django.contrib import admin
from django.contrib.auth import views as auth_views
from django.urls import include, path

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
