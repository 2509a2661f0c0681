"""Pages outside any team: create one, accept an invitation."""

from django.urls import path

from greenops.teams import views

urlpatterns = [
    path("new-team/", views.create_team, name="team-create"),
    path("invitations/<str:token>/", views.accept_invitation, name="invitation-accept"),
]
