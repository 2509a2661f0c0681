"""Pages of the benchmarks app, mounted under /teams/<slug>/ by greenops/urls.py."""

from django.urls import path

from greenops.benchmarks import views

urlpatterns = [
    path("benchmarks/", views.overview, name="benchmark-overview"),
    path("benchmarks/runs/<int:run_id>/", views.run_detail, name="benchmark-run"),
    path("benchmarks/runs/<int:run_id>/acknowledge/", views.acknowledge,
         name="benchmark-acknowledge"),
    path("benchmarks/<slug:workload_slug>/", views.workload_history, name="benchmark-history"),
]
