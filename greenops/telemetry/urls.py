"""A team's hosts (enroll, revoke, rotate, remove), mounted under /teams/<slug>/ by
greenops/urls.py."""

from django.urls import path

from greenops.telemetry import views_hosts

urlpatterns = [
    path("hosts/", views_hosts.host_list, name="host-list"),
    path("hosts/add/", views_hosts.add_host, name="host-add"),
    path("hosts/<int:host_id>/revoke", views_hosts.revoke_host, name="host-revoke"),
    path("hosts/<int:host_id>/rotate", views_hosts.rotate_host, name="host-rotate"),
    path("hosts/<int:host_id>/remove", views_hosts.remove_host, name="host-remove"),
    path("hosts/<int:host_id>/delete", views_hosts.delete_host_history, name="host-delete"),
]
