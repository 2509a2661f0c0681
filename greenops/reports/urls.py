"""Pages of the reports app, mounted under /teams/<slug>/ by greenops/urls.py."""

from django.urls import path

from greenops.reports import views

urlpatterns = [
    path("reports/", views.reports, name="reports"),
    path("reports/generate", views.generate_view, name="reports-generate"),
    path("reports/subscription", views.subscribe, name="reports-subscribe"),
    path("reports/<int:report_id>/", views.detail, name="report-detail"),
    path("reports/<int:report_id>/status", views.status, name="report-status"),
    path("reports/<int:report_id>/report.<ext>", views.download, name="report-download"),
]
