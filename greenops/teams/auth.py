"""Bearer authentication for application-facing API endpoints (django-ninja).

Applications send a team API token (`gha_…`); endpoints that the host agent also calls accept
that host's token (`gho_…`) and act for the host's team. Failures raise the API's usual
FieldError, so a bad token answers 401 with {"error", "field", "message"} like every other
rejection instead of ninja's bare {"detail": "Unauthorized"}.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from django.http import HttpRequest
from ninja.security import HttpBearer

from greenops.errors import FieldError
from greenops.teams.models import ApiToken, Team, api_token_for, api_token_row


@dataclass(frozen=True)
class Caller:
    """Who is calling: always a team; the token row or the host that authenticated."""

    team: Team
    api_token: ApiToken | None = None
    host: object | None = None  # greenops.telemetry.models.Host when a host token was used

    @property
    def label(self) -> str:
        if self.api_token is not None:
            return f"token {self.api_token.prefix}"
        return f"host {getattr(self.host, 'name', '?')}"


def _unauthorized(message: str) -> FieldError:
    return FieldError(401, "unauthorized", "Authorization", message)


def bearer_token(request: HttpRequest) -> str | None:
    header = request.headers.get("Authorization", "")
    if not header.startswith("Bearer "):
        return None
    return header[len("Bearer "):].strip() or None


# Finds the host a plaintext token belongs to (greenops.telemetry.host_auth.host_by_token), or
# None. Passed in, because hosts belong to telemetry, which sits above teams.
HostLookup = Callable[[str], object | None]


def _forbidden_scope(row: ApiToken, need: str) -> FieldError:
    return FieldError(403, "forbidden", "Authorization",
                      f"this token's scope is {row.scope}; this request needs a token with "
                      f"{need} scope")


def caller_for_token(token: str | None, *, host_lookup: HostLookup | None,
                     need: str = "ingest") -> Caller:
    """Resolve a plaintext token to its team, or raise a 401 FieldError (unknown, revoked or
    expired token) or a 403 (a team token whose scope does not allow `need`). With
    `host_lookup`, a host's token is accepted too and acts for the host's team."""
    if not token:
        raise _unauthorized("send a team API token as 'Authorization: Bearer <token>'")
    row = api_token_for(token)
    if row is not None:
        if not row.allows(need):
            raise _forbidden_scope(row, need)
        return Caller(team=row.team, api_token=row)
    dead = api_token_row(token)
    if dead is not None:  # its holder knows it existed; saying why saves a support ticket
        raise _unauthorized(f"this token is {dead.state()}")
    if host_lookup is not None:
        host = host_lookup(token)
        if host is not None:
            return Caller(team=host.team, host=host)
    raise _unauthorized("unknown or revoked token")


class TeamTokenAuth(HttpBearer):
    """`auth=TeamTokenAuth()` on a ninja operation: request.auth becomes a Caller."""

    def __init__(self, host_lookup: HostLookup | None = None, need: str = "ingest") -> None:
        super().__init__()
        self.host_lookup = host_lookup
        self.need = need

    def __call__(self, request: HttpRequest) -> Caller:
        # Overridden so a missing header is a house-style 401 too, not ninja's default body.
        return caller_for_token(bearer_token(request), host_lookup=self.host_lookup,
                                need=self.need)

    def authenticate(self, request: HttpRequest, token: str) -> Caller:
        return caller_for_token(token, host_lookup=self.host_lookup, need=self.need)


team_token_auth = TeamTokenAuth()
# team_or_host_token_auth (a team's or a host's token) lives in greenops.telemetry.host_auth.
