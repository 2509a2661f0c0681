"""Pages outside any team: create one, accept an invitation, the agent downloads."""

from django.urls import path

from greenops.teams import views
from greenops.telemetry import views_hosts

urlpatterns = [
    path("new-team/", views.create_team, name="team-create"),
    path("invitations/<str:token>/", views.accept_invitation, name="invitation-accept"),
    path("downloads/greenops-agent.service", views_hosts.systemd_unit, name="agent-unit"),
    path("downloads/<str:filename>", views_hosts.agent_wheel, name="agent-wheel"),
]
