"""Team endpoints that a person (browser session) and a tool (scoped team API token) both call.

A request with `Authorization: Bearer gha_…` is judged by the token alone: unknown, revoked or
expired is 401; another team's token is 404 (another team's things do not exist for it, as for
an outsider's session); a scope that does not cover the action is 403. Without the header the
browser session is used, exactly as `ninja.security.django_auth` does (CSRF on writes included).
Errors are the API's one FieldError shape, so they answer {"error", "field", "message"}.
"""

from __future__ import annotations

from django.conf import settings
from django.http import Http404, HttpRequest
from ninja.security import HttpBearer, django_auth

from greenops.errors import FieldError
from greenops.teams.auth import Caller, bearer_token, caller_for_token
from greenops.teams.models import ApiToken, Role, Team
from greenops.teams.permissions import MATRIX, authorize_api

# Actions a read token may take: the ones that only look and that every team member (viewer)
# may take. Everything else in the permission matrix -- changes, and the admins' audit log --
# needs an admin-scoped token (or a person's session with the role).
READ_ACTIONS = frozenset(action for action, rule in MATRIX.items()
                         if action.endswith(".view") and rule.min_role == Role.VIEWER)


def kind_of(action: str) -> str:
    return "read" if action in READ_ACTIONS else "admin"


class TeamAuth(HttpBearer):
    """`auth=team_auth` on a /teams/{slug}/… operation: request.auth is a Caller (token) or the
    session's user. Follow it with `authorize_caller` to pick the team and check the action."""

    def __call__(self, request: HttpRequest):
        token = bearer_token(request)
        if token is not None:
            # Expiry and revocation are checked here; "read" is the least any of these
            # endpoints needs (an ingest token is refused at once), and authorize_caller checks
            # the action (a read token may GET, not change the team).
            return caller_for_token(token, host_lookup=None, need="read")
        user = django_auth(request)  # None without a session; raises on a failed CSRF check
        if user:
            return user
        raise FieldError(401, "unauthorized", settings.SESSION_COOKIE_NAME,
                         "log in first (session cookie), or send a team API token as "
                         "'Authorization: Bearer <token>'")

    def authenticate(self, request: HttpRequest, token: str):  # pragma: no cover - unused
        return caller_for_token(token, host_lookup=None, need="read")


team_auth = TeamAuth()


def authorize_caller(request: HttpRequest, slug: str, action: str) -> Team:
    """The team named by `slug` if the caller (token or session) may take `action` in it."""
    caller = request.auth
    if isinstance(caller, Caller):
        row: ApiToken = caller.api_token
        if caller.team.slug != slug:
            raise Http404("No such team")
        need = kind_of(action)
        if not row.allows(need):
            raise FieldError(403, "forbidden", "Authorization",
                             f"this token's scope is {row.scope}; {action} needs a token with "
                             f"{need} scope")
        return caller.team
    team, _role = authorize_api(request.user, slug, action)
    return team


def actor_of(request: HttpRequest) -> tuple[object | None, str]:
    """(user, label) for the audit log: a session's user, or no user and the token's label."""
    caller = request.auth
    if isinstance(caller, Caller):
        return None, caller.label
    return request.user, ""


def usage_examples(method: str, path: str, scope: str) -> str:
    """The curl and Python lines the API docs show under every operation that takes a team
    token (Markdown), so a reader can copy a working call."""
    url = "$GREENOPS_URL" + path.replace("{slug}", "$TEAM")
    py_url = "f\"{url}" + path.replace("{slug}", "{team}") + "\""
    verb = method.upper()
    data = " -H 'Content-Type: application/json' -d @body.json" if verb != "GET" else ""
    py_call = (f"requests.{method.lower()}({py_url}, headers=auth, timeout=30)" if verb == "GET"
               else f"requests.{method.lower()}({py_url}, headers=auth, json=body, timeout=30)")
    return (
        f"\n\n**With a team API token** (scope `{scope}` or `admin`; create one on the team's "
        "API tokens page):\n\n"
        f"```sh\ncurl -sS -X {verb} -H \"Authorization: Bearer $GREENOPS_TOKEN\"{data} "
        f"\"{url}\"\n```\n\n"
        "```python\nimport os, requests\nurl, team = os.environ['GREENOPS_URL'], "
        "os.environ['TEAM']\nauth = {'Authorization': 'Bearer ' + os.environ['GREENOPS_TOKEN']}\n"
        f"r = {py_call}\nr.raise_for_status()\nprint(r.json())\n```\n"
    )
