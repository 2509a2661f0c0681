"""Teams and who belongs to them. Every page and API call is scoped through these."""

from __future__ import annotations

from django.conf import settings
from django.db import models
from django.http import Http404
from django.utils.text import slugify


class Role(models.TextChoices):
    OWNER = "owner", "Owner"
    ADMIN = "admin", "Admin"
    MEMBER = "member", "Member"
    VIEWER = "viewer", "Viewer"


class TeamQuerySet(models.QuerySet):
    def for_user(self, user) -> TeamQuerySet:
        if not user.is_authenticated:
            return self.none()
        return self.filter(memberships__user=user)


class Team(models.Model):
    name = models.CharField(max_length=100)
    slug = models.SlugField(max_length=100, unique=True)
    created_at = models.DateTimeField(auto_now_add=True)

    objects = TeamQuerySet.as_manager()

    class Meta:
        ordering = ["name"]

    def __str__(self) -> str:
        return self.name

    def save(self, *args, **kwargs) -> None:
        if not self.slug:
            self.slug = slugify(self.name)[:100] or "team"
        super().save(*args, **kwargs)

    def role_of(self, user) -> str | None:
        if not user.is_authenticated:
            return None
        m = self.memberships.filter(user=user).only("role").first()
        return m.role if m else None


class Membership(models.Model):
    team = models.ForeignKey(Team, models.CASCADE, related_name="memberships")
    user = models.ForeignKey(settings.AUTH_USER_MODEL, models.CASCADE, related_name="memberships")
    role = models.CharField(max_length=10, choices=Role.choices, default=Role.MEMBER)
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        constraints = [models.UniqueConstraint(fields=["team", "user"], name="one_membership")]

    def __str__(self) -> str:
        return f"{self.user} in {self.team} as {self.role}"


def team_for_user_or_404(user, slug: str) -> Team:
    """The one access check for team-scoped pages: a team the user isn't in does not exist."""
    team = Team.objects.for_user(user).filter(slug=slug).first()
    if team is None:
        raise Http404("No such team")
    return team
