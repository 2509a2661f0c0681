"""Pages of the kpis app, mounted under /teams/<slug>/ by greenops/urls.py."""

from django.urls import path

from greenops.kpis import views

urlpatterns = [
    path("kpis/", views.overview, name="kpi-overview"),
    path("kpis/workloads/<slug:workload_slug>/", views.workload, name="kpi-workload"),
    path("kpis/jobs/<int:job_id>/", views.training_job, name="kpi-job"),
]
