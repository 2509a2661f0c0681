from django.contrib import admin
from django.contrib.auth import views as auth_views
from django.urls import include, path

from greenops.api.v1 import api

urlpatterns = [
    path("admin/", admin.site.urls),
    path("login/", auth_views.LoginView.as_view(), name="login"),
    path("logout/", auth_views.LogoutView.as_view(), name="logout"),
    path("api/v1/", api.urls),
    path("teams/<slug:slug>/", include("greenops.workloads.urls")),
    path("teams/<slug:slug>/", include("greenops.kpis.urls")),
    path("teams/<slug:slug>/", include("greenops.costs.urls")),
    path("", include("dashboards.urls")),
]
