"""Pages of the costs app, mounted under /teams/<slug>/ by greenops/urls.py."""

from django.urls import path

from greenops.costs import views, views_prices

urlpatterns = [
    path("costs/", views.recommendations, name="costs-recommendations"),
    path("costs/prices/", views_prices.price_overrides, name="price-overrides"),
    path("costs/prices/new", views_prices.add_price_override, name="price-override-add"),
    path("costs/prices/<int:override_id>/end", views_prices.end_price_override,
         name="price-override-end"),
]
