"""Team pages: create a team, members and invitations, the permission matrix, the audit log,
and the owners' settings page (rename, delete)."""

from __future__ import annotations

from django.contrib import messages
from django.contrib.auth.decorators import login_required
from django.core.exceptions import PermissionDenied
from django.core.paginator import Paginator
from django.http import HttpRequest, HttpResponse
from django.shortcuts import get_object_or_404, redirect, render
from django.views.decorators.http import require_POST

from greenops import windows
from greenops.errors import FieldError
from greenops.site import site_url
from greenops.teams import invitations, membership
from greenops.teams.forms import InviteForm, RoleForm, TeamForm
from greenops.teams.models import Invitation, Membership, Team
from greenops.teams.permissions import ROLE_ORDER, matrix_rows, team_permission


@login_required
def create_team(request: HttpRequest) -> HttpResponse:
    form = TeamForm(request.POST or None)
    if request.method == "POST" and form.is_valid():
        team = membership.create_team(request.user, form.cleaned_data["name"])
        return redirect("team-dashboard", team.slug)
    return render(request, "teams/create.html", {"form": form})


@team_permission("members.view")
def members(request: HttpRequest, team: Team) -> HttpResponse:
    can_manage = "members.manage" in request.team_actions
    form = InviteForm(request.POST or None)
    if request.method == "POST":
        if not can_manage:
            raise PermissionDenied("members.manage needs the owner role")
        if form.is_valid():
            inv, link = invitations.invite(team, request.user, form.cleaned_data["email"],
                                           form.cleaned_data["role"],
                                           site_url=site_url(request))
            if link is not None:
                # Kept server-side and popped by the next page view: shown once, to the inviter.
                request.session[INVITE_LINK_KEY] = {"email": inv.email, "link": link}
            else:
                messages.success(request, f"Invitation to {inv.email} created; its mail is on "
                                          "its way (delivery is shown below).")
            return redirect("team-members", team.slug)
    return _members_page(request, team, form)


INVITE_LINK_KEY = "greenops_invite_link"


def _members_page(request: HttpRequest, team: Team, form: InviteForm) -> HttpResponse:
    can_manage = "members.manage" in request.team_actions
    ctx = {
        "team": team, "form": form, "can_manage": can_manage, "roles": ROLE_ORDER,
        "memberships": team.memberships.select_related("user").order_by("user__username"),
        "pending": team.invitations.pending() if can_manage else [],
        "invite_link": request.session.pop(INVITE_LINK_KEY, None) if can_manage else None,
    }
    return render(request, "teams/members.html", ctx)


@require_POST
@team_permission("members.manage")
def change_role(request: HttpRequest, team: Team, membership_id: int) -> HttpResponse:
    m = get_object_or_404(Membership, id=membership_id, team=team)
    form = RoleForm(request.POST)
    if form.is_valid():
        try:
            membership.change_role(team, request.user, m, form.cleaned_data["role"])
        except membership.MembershipError as exc:
            messages.error(request, str(exc))
    return redirect("team-members", team.slug)


@require_POST
@team_permission("members.manage")
def remove_member(request: HttpRequest, team: Team, membership_id: int) -> HttpResponse:
    m = get_object_or_404(Membership, id=membership_id, team=team)
    try:
        membership.remove_member(team, request.user, m)
    except membership.MembershipError as exc:
        messages.error(request, str(exc))
    if not team.memberships.filter(user=request.user).exists():
        return redirect("home")
    return redirect("team-members", team.slug)


@require_POST
@team_permission("members.manage")
def resend_invitation(request: HttpRequest, team: Team, invitation_id: int) -> HttpResponse:
    inv = get_object_or_404(Invitation, id=invitation_id, team=team)
    if invitations.resend(inv, request.user, site_url=site_url(request)):
        messages.success(request, f"Invitation to {inv.email} sent again with a new link; the "
                                   "earlier link no longer works.")
    return redirect("team-members", team.slug)


@require_POST
@team_permission("members.manage")
def withdraw_invitation(request: HttpRequest, team: Team, invitation_id: int) -> HttpResponse:
    inv = get_object_or_404(Invitation, id=invitation_id, team=team)
    if invitations.withdraw(inv, request.user):
        messages.success(request, f"Invitation to {inv.email} withdrawn; its link no longer "
                                   "works.")
    return redirect("team-members", team.slug)


@team_permission("team.manage")
def team_settings(request: HttpRequest, team: Team) -> HttpResponse:
    """Rename (POST here), the time zone form (POSTs to team_time_zone) and the form that
    deletes the team (POSTs to team_delete)."""
    error, status = None, 200
    if request.method == "POST":
        try:
            membership.rename_team(team, request.user, request.POST.get("name", ""))
        except membership.MembershipError as exc:
            error, status = str(exc), 400
        else:
            messages.success(request, f"The team is now called {team.name}.")
            return redirect("team-settings", team.slug)
    return _settings_page(request, team, error=error, status=status)


def _settings_page(request: HttpRequest, team: Team, *, error: str | None = None,
                   tz_error: str | None = None, status: int = 200) -> HttpResponse:
    return render(request, "teams/settings.html", {
        "team": team, "error": error, "tz_error": tz_error, "name_max": membership.TEAM_NAME_MAX,
        "time_zones": sorted(windows.time_zone_names()),
        "hosts": team.hosts.count(), "members": team.memberships.count(),
    }, status=status)


@require_POST
@team_permission("team.manage")
def team_time_zone(request: HttpRequest, team: Team) -> HttpResponse:
    try:
        membership.set_time_zone(team, request.user, request.POST.get("time_zone", ""))
    except FieldError as exc:
        return _settings_page(request, team, tz_error=exc.message, status=400)
    messages.success(request, f"Report months now follow {team.time_zone}.")
    return redirect("team-settings", team.slug)


@require_POST
@team_permission("team.manage")
def team_delete(request: HttpRequest, team: Team) -> HttpResponse:
    try:
        membership.delete_team(team, request.user, confirm=request.POST.get("confirm", ""))
    except membership.MembershipError:
        messages.error(request, f"Type the team's name ({team.name}) exactly to delete it.")
        return redirect("team-settings", team.slug)
    messages.success(request, f"The team {team.name} and everything in it were deleted.")
    return redirect("home")


@team_permission("team.view")
def permissions_page(request: HttpRequest, team: Team) -> HttpResponse:
    return render(request, "teams/permissions.html", {
        "team": team, "roles": ROLE_ORDER, "rows": matrix_rows(), "role": request.team_role})


@team_permission("audit.view")
def audit_log(request: HttpRequest, team: Team) -> HttpResponse:
    page = Paginator(team.audit_events.all(), 50).get_page(request.GET.get("page"))
    return render(request, "teams/audit.html", {"team": team, "page": page})


def accept_invitation(request: HttpRequest, token: str) -> HttpResponse:
    """GET shows what the link is for; POST (logged in) joins. Anonymous: log in first."""
    try:
        inv = invitations.lookup(token)
    except invitations.InvitationError as exc:
        return render(request, "teams/invitation.html", {"error": str(exc)}, status=410
                      if exc.code in ("used", "expired", "revoked") else 404)
    if request.user.is_authenticated and not invitations.is_for(inv, request.user):
        return render(request, "teams/invitation.html", {
            "invitation": inv, "wrong_user": invitations.wrong_user_message(inv, request.user),
        }, status=403)
    if request.method == "POST" and request.user.is_authenticated:
        try:
            invitations.accept(token, request.user)
        except invitations.InvitationError as exc:
            return render(request, "teams/invitation.html", {"error": str(exc)}, status=410)
        return redirect("team-dashboard", inv.team.slug)
    return render(request, "teams/invitation.html", {"invitation": inv})
