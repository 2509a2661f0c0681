"""Pages of the carbon app, mounted under /teams/<slug>/ by greenops/urls.py. The methodology
page (dashboards/methodology.py) belongs to no team; greenops/urls.py mounts it at
/methodology/."""

from django.urls import path

from greenops.carbon import views, views_sites

urlpatterns = [
    path("carbon/runs/", views.runs, name="carbon-runs"),
    path("carbon/runs/upload", views.upload_csv, name="carbon-upload"),
    path("carbon/sites/", views.sites, name="carbon-sites"),
    path("carbon/sites/new/", views_sites.site_create, name="site-create"),
    path("carbon/sites/<int:site_id>/edit/", views_sites.site_edit, name="site-edit"),
]
