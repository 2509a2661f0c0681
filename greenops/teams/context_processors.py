"""Template context every page needs: the signed-in user's teams for the header switcher."""

from __future__ import annotations

from django.http import HttpRequest

from greenops.teams.permissions import user_memberships


def my_teams(request: HttpRequest) -> dict:
    # One query with the teams joined (iterating user.memberships would cost a query per
    # team), in the order the user joined, as the switcher always listed them; a team page's
    # access check has read them already.
    if getattr(request, "user", None) is None:  # a request the auth middleware never saw
        return {"my_memberships": []}
    return {"my_memberships": user_memberships(request)}  # [] when signed out
