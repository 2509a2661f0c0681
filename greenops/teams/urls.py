"""Team-scoped pages, mounted under /teams/<slug>/ by greenops/urls.py."""

from django.urls import path

from greenops.teams import views
from greenops.telemetry import views_hosts

urlpatterns = [
    path("members/", views.members, name="team-members"),
    path("members/<int:membership_id>/role", views.change_role, name="member-role"),
    path("members/<int:membership_id>/remove", views.remove_member, name="member-remove"),
    path("members/invitations/<int:invitation_id>/withdraw", views.withdraw_invitation,
         name="invitation-withdraw"),
    path("members/invitations/<int:invitation_id>/resend", views.resend_invitation,
         name="invitation-resend"),
    path("settings/", views.team_settings, name="team-settings"),
    path("settings/time-zone", views.team_time_zone, name="team-time-zone"),
    path("settings/delete", views.team_delete, name="team-delete"),
    path("permissions/", views.permissions_page, name="team-permissions"),
    path("audit/", views.audit_log, name="team-audit"),
    path("hosts/", views_hosts.host_list, name="host-list"),
    path("hosts/add/", views_hosts.add_host, name="host-add"),
    path("hosts/<int:host_id>/revoke", views_hosts.revoke_host, name="host-revoke"),
    path("hosts/<int:host_id>/rotate", views_hosts.rotate_host, name="host-rotate"),
    path("hosts/<int:host_id>/remove", views_hosts.remove_host, name="host-remove"),
    path("hosts/<int:host_id>/delete", views_hosts.delete_host_history, name="host-delete"),
]
