"""Pages of the carbon app, mounted under /teams/<slug>/ by greenops/urls.py. The methodology
page belongs to no team; greenops/urls.py mounts it at /methodology/."""

from django.urls import path

from greenops.carbon import views

urlpatterns = [
    path("carbon/runs/", views.runs, name="carbon-runs"),
    path("carbon/runs/upload", views.upload_csv, name="carbon-upload"),
    path("carbon/sites/", views.sites, name="carbon-sites"),
]
