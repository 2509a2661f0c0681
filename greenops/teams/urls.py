"""Team-scoped pages, mounted under /teams/<slug>/ by greenops/urls.py."""

from django.urls import path

from greenops.teams import views

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
]
