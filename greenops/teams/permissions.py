"""Who may do what in a team: the written permission matrix, and the one check that enforces it.

Roles are ordered viewer < member < admin < owner, and each action needs a minimum role, so the
whole policy is the table below. Pages call it through `team_permission` (a view decorator) and
API endpoints through `authorize_api`; the permissions page renders the same table.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from functools import wraps

from django.contrib.auth.decorators import login_required
from django.core.exceptions import PermissionDenied
from django.db.models import F
from django.http import Http404, HttpRequest, HttpResponse

from greenops.errors import FieldError
from greenops.teams.models import Membership, Role, Team

ROLE_ORDER: tuple[str, ...] = (Role.VIEWER, Role.MEMBER, Role.ADMIN, Role.OWNER)


@dataclass(frozen=True)
class Rule:
    min_role: str
    description: str


# action -> minimum role. Viewers read; members also manage alerts and reports (and upload
# measured runs); admins also manage hosts, workloads, channels and API tokens; owners also
# manage members and the team.
MATRIX: dict[str, Rule] = {
    "team.view": Rule(Role.VIEWER, "See the team's dashboards, hosts, workloads and reports"),
    "hosts.view": Rule(Role.VIEWER, "See the host list: online status, agent, GPUs, spool lag"),
    "members.view": Rule(Role.VIEWER, "See who is in the team and their roles"),
    "alerts.manage": Rule(Role.MEMBER, "Create, change and silence alerts"),
    "reports.manage": Rule(Role.MEMBER, "Create and schedule reports"),
    # Uploaded codecarbon runs are measurements a member brings, like a report, not team setup.
    "runs.upload": Rule(Role.MEMBER, "Upload codecarbon emissions.csv runs"),
    # Accepting a measured regression is a review decision, like a code review's approval.
    "benchmarks.acknowledge": Rule(Role.MEMBER, "Acknowledge a benchmark regression with a "
                                   "reason"),
    # Marking two workloads or periods as variants is analysis a member does, like a report.
    "variants.manage": Rule(Role.MEMBER, "Mark and unmark workload variants to compare"),
    "hosts.manage": Rule(Role.ADMIN, "Add hosts, revoke or rotate host tokens, remove hosts"),
    "workloads.manage": Rule(Role.ADMIN, "Register and change workloads"),
    # Prices and sites change every cost and carbon figure the team sees: team setup.
    "prices.manage": Rule(Role.ADMIN, "Set price overrides: custom $/h, negotiated discounts, "
                          "on-premises costs"),
    "sites.manage": Rule(Role.ADMIN, "Create and edit sites: PUE, grid intensity, location"),
    "channels.manage": Rule(Role.ADMIN, "Configure notification channels"),
    "tokens.manage": Rule(Role.ADMIN, "Create and revoke API tokens"),
    "audit.view": Rule(Role.ADMIN, "Read the audit log"),
    "members.manage": Rule(Role.OWNER, "Invite people, change roles, remove members"),
    "team.manage": Rule(Role.OWNER, "Rename the team, set its time zone, or delete it"),
    "hosts.delete_history": Rule(Role.OWNER, "Delete a host together with all its history"),
}


def rank(role: str | None) -> int:
    """Position in ROLE_ORDER; -1 for no role, so nothing is allowed."""
    return ROLE_ORDER.index(role) if role in ROLE_ORDER else -1


def allows(role: str | None, action: str) -> bool:
    # An unknown action is a programming error, not a "no": fail loudly in tests.
    return rank(role) >= rank(MATRIX[action].min_role)


def allowed_actions(role: str | None) -> set[str]:
    return {action for action in MATRIX if allows(role, action)}


def matrix_rows() -> list[dict]:
    """The table for the permissions page: one row per action, a yes/no per role."""
    return [
        {"action": action, "description": rule.description, "min_role": rule.min_role,
         "roles": [allows(role, action) for role in ROLE_ORDER]}
        for action, rule in MATRIX.items()
    ]


def user_memberships(request: HttpRequest) -> list[Membership]:
    """The signed-in user's memberships with their teams, in the order they joined; read once
    per request: a team page's access check and the header's team switcher both need them."""
    found = getattr(request, "_user_memberships", None)
    if found is None:
        user = request.user
        found = (list(user.memberships.select_related("team").order_by("id"))
                 if user.is_authenticated else [])
        request._user_memberships = found
    return found


def authorize(user, slug: str, action: str,
              memberships: list[Membership] | None = None) -> tuple[Team, str]:
    """The team and the user's role, if the role allows `action`. `memberships`: the user's
    (user_memberships), when the caller has them.

    Not a member: 404 (another team's things do not exist for you). A member whose role is too
    low: PermissionDenied (403), because they can see the team and deserve to know why.
    """
    if memberships is not None:
        mine = next((m for m in memberships if m.team.slug == slug), None)
        team, role = (mine.team, mine.role) if mine is not None else (None, None)
    else:
        # The team with the user's role in it, read through the join that finds the
        # membership (one per team and user) rather than a second query.
        team = (Team.objects.for_user(user).filter(slug=slug)
                .annotate(user_role=F("memberships__role")).first())
        role = team.user_role if team is not None else None
    if team is None:
        raise Http404("No such team")
    if not allows(role, action):
        raise PermissionDenied(f"{action} needs the {MATRIX[action].min_role} role")
    return team, role


def authorize_api(user, slug: str, action: str) -> tuple[Team, str]:
    """`authorize` for API endpoints: a too-low role is a house-style 403 JSON error."""
    try:
        return authorize(user, slug, action)
    except PermissionDenied as exc:
        raise FieldError(403, "forbidden", None, str(exc)) from None


def team_permission(action: str) -> Callable:
    """Decorate a team page `view(request, team, ...)`; the URL passes `slug`.

    The role is put on the request (`request.team_role`) for templates that show or hide
    buttons; the check itself never relies on the template.
    """

    def decorator(view: Callable[..., HttpResponse]) -> Callable[..., HttpResponse]:
        @login_required
        @wraps(view)
        def wrapper(request: HttpRequest, slug: str, *args, **kwargs) -> HttpResponse:
            team, role = authorize(request.user, slug, action, user_memberships(request))
            request.team_role = role
            request.team_actions = allowed_actions(role)
            return view(request, team, *args, **kwargs)

        wrapper.permission_action = action  # lets a test list every guarded view
        return wrapper

    return decorator
