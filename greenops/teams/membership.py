"""Creating teams and managing who is in them. Plain functions: views and tests call these."""

from __future__ import annotations

from django.db import transaction
from django.utils.text import slugify

from greenops import windows
from greenops.teams import audit
from greenops.teams.models import AuditEvent, Membership, Role, Team
from greenops.teams.signals import team_deleting


class MembershipError(ValueError):
    """A change that would break the team (e.g. leaving it without an owner)."""


def unique_slug(name: str) -> str:
    base = slugify(name)[:90] or "team"
    slug, n = base, 1
    while Team.objects.filter(slug=slug).exists():
        n += 1
        slug = f"{base}-{n}"
    return slug


@transaction.atomic
def create_team(user, name: str) -> Team:
    """A new team with its creator as owner."""
    team = Team.objects.create(name=name.strip(), slug=unique_slug(name))
    Membership.objects.create(team=team, user=user, role=Role.OWNER)
    audit.record(team, user, AuditEvent.Action.TEAM_CREATED, team.name)
    return team


def _owners(team: Team) -> int:
    return Membership.objects.filter(team=team, role=Role.OWNER).count()


@transaction.atomic
def change_role(team: Team, actor, membership: Membership, role: str) -> Membership:
    if role not in Role.values:
        raise MembershipError(f"unknown role {role!r}")
    # Lock the team's memberships so two owners demoting each other cannot both succeed.
    list(Membership.objects.select_for_update().filter(team=team))
    membership.refresh_from_db()
    if membership.role == Role.OWNER and role != Role.OWNER and _owners(team) <= 1:
        raise MembershipError("a team needs at least one owner; make someone else owner first")
    old = membership.role
    if old != role:
        membership.role = role
        membership.save(update_fields=["role"])
        audit.record(team, actor, AuditEvent.Action.MEMBER_ROLE_CHANGED,
                     membership.user.get_username(), old=old, new=role)
    return membership


@transaction.atomic
def remove_member(team: Team, actor, membership: Membership) -> None:
    list(Membership.objects.select_for_update().filter(team=team))
    membership.refresh_from_db()
    if membership.role == Role.OWNER and _owners(team) <= 1:
        raise MembershipError("the last owner cannot be removed")
    username = membership.user.get_username()
    membership.delete()
    audit.record(team, actor, AuditEvent.Action.MEMBER_REMOVED, username)


TEAM_NAME_MAX = Team._meta.get_field("name").max_length


def clean_team_name(name: str) -> str:
    name = (name or "").strip()
    if not name or len(name) > TEAM_NAME_MAX:
        raise MembershipError(f"a team name is 1 to {TEAM_NAME_MAX} characters")
    return name


@transaction.atomic
def rename_team(team: Team, actor, name: str) -> Team:
    """A new display name. The slug stays, so links, bookmarks and API clients keep working."""
    name, old = clean_team_name(name), team.name
    if name != old:
        team.name = name
        team.save(update_fields=["name"])
        audit.record(team, actor, AuditEvent.Action.TEAM_RENAMED, name, old=old, new=name)
    return team


@transaction.atomic
def set_time_zone(team: Team, actor, name: str) -> Team:
    """The team's IANA time zone, in which its report months begin and end. An unknown name is
    a FieldError naming `time_zone`; nothing is saved."""
    name = (name or "").strip()
    windows.time_zone(name)
    old = team.time_zone
    if name != old:
        team.time_zone = name
        team.save(update_fields=["time_zone"])
        audit.record(team, actor, AuditEvent.Action.TEAM_TIME_ZONE, name, old=old, new=name)
    return team


@transaction.atomic
def delete_team(team: Team, actor, *, confirm: str) -> None:
    """Delete the team and everything in it: hosts with all their samples and rollups,
    workloads, tokens, invitations, its audit log. `confirm` must be the team's exact name, so
    a slip of the mouse cannot do it. One audit row (with no team) records the deletion."""
    if confirm.strip() != team.name:
        raise MembershipError(f"type the team's name ({team.name}) exactly to delete it")
    # Samples and rollups do not cascade (no database foreign key): telemetry's receiver takes
    # the same path as deleting one host's history (telemetry sits above teams, so a signal).
    samples = sum(deleted for _receiver, deleted in team_deleting.send(sender=Team, team=team))
    detail = {"slug": team.slug, "team_id": team.id, "hosts": team.hosts.count(),
              "members": team.memberships.count(), "samples": samples}
    name = team.name
    team.delete()
    audit.record(None, actor, AuditEvent.Action.TEAM_DELETED, name, **detail)
