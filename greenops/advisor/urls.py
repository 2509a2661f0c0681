"""Pages of the advisor app, mounted under /teams/<slug>/ by greenops/urls.py."""

from django.urls import path

from greenops.advisor import views

urlpatterns = [
    path("advisor/compare/", views.compare, name="advisor-compare"),
    path("advisor/variants/", views.pairs, name="advisor-pairs"),
    path("advisor/variants/new", views.pair_new, name="advisor-pair-new"),
    path("advisor/variants/<int:pair_id>/", views.pair, name="advisor-pair"),
    path("advisor/variants/<int:pair_id>/delete", views.pair_delete, name="advisor-pair-delete"),
    path("advisor/workloads/<slug:workload_slug>/", views.workload, name="advisor-workload"),
]
