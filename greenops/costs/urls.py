"""Pages of the costs app, mounted under /teams/<slug>/ by greenops/urls.py."""

from django.urls import path

from greenops.costs import views

urlpatterns = [
    path("costs/", views.recommendations, name="costs-recommendations"),
]
