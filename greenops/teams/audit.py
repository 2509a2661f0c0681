"""Recording admin actions. One function, so every caller writes the same shape of row."""

from __future__ import annotations

from greenops.teams.models import AuditEvent, Team


def record(team: Team | None, actor, action: str, target: str = "", *, actor_label: str = "",
           **detail) -> AuditEvent:
    """Write one audit row. `actor` is a user or None (then `actor_label` says who, e.g. a host).
    `team` is None only for the row recording a team's deletion."""
    label = actor_label or (actor.get_username() if actor is not None else "system")
    return AuditEvent.objects.create(
        team=team, actor=actor if actor is not None and actor.is_authenticated else None,
        actor_label=label[:150], action=action, target=target[:255], detail=detail,
    )
