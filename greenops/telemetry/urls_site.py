"""The agent's downloads (its wheel and systemd unit), outside any team."""

from django.urls import path

from greenops.telemetry import views_hosts

urlpatterns = [
    path("downloads/greenops-agent.service", views_hosts.systemd_unit, name="agent-unit"),
    path("downloads/<str:filename>", views_hosts.agent_wheel, name="agent-wheel"),
]
