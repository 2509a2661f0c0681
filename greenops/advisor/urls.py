"""Pages of the advisor app, mounted under /teams/<slug>/ by greenops/urls.py."""

from django.urls import path

from greenops.advisor import views

urlpatterns = [
    path("advisor/compare/", views.compare, name="advisor-compare"),
    path("advisor/workloads/<slug:workload_slug>/", views.workload, name="advisor-workload"),
]
