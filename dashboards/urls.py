from django.urls import path

from dashboards import views

urlpatterns = [
    path("", views.home, name="home"),
    path("teams/<slug:slug>/", views.team_dashboard, name="team-dashboard"),
    path("teams/<slug:slug>/hosts/<int:host_id>/", views.host_detail, name="host-detail"),
    path("teams/<slug:slug>/hosts/<int:host_id>/edit/", views.host_edit, name="host-edit"),
    path("healthz", views.healthz, name="healthz"),
]
