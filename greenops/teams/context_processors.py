"""Template context every page needs: the signed-in user's teams for the header switcher."""

from __future__ import annotations

from django.http import HttpRequest


def my_teams(request: HttpRequest) -> dict:
    # One query with the teams joined: the header renders on every page, and iterating
    # user.memberships there would cost a query per team.
    user = getattr(request, "user", None)
    if user is None or not user.is_authenticated:
        return {"my_memberships": []}
    # In the order the user joined, as the switcher always listed them.
    return {"my_memberships": list(user.memberships.select_related("team").order_by("id"))}
