"""The host agent's bearer token as a django-ninja auth class, so every endpoint an agent calls
declares the `HostToken` security scheme in the OpenAPI schema (the class name is the scheme's
name there). A failure raises the usual 401 FieldError through ingest.host_for_token."""

from __future__ import annotations

from django.http import HttpRequest
from ninja.security import HttpBearer

from greenops.teams.auth import TeamTokenAuth
from greenops.telemetry import ingest
from greenops.telemetry.models import Host
from greenops.tokens import hash_token


class HostToken(HttpBearer):
    """`auth=host_token` on a ninja operation: request.auth becomes the Host."""

    openapi_description = "The host token (`gho_…`) an agent receives when it enrolls."

    def __init__(self, *, lean: bool = False) -> None:
        super().__init__()
        self.lean = lean

    def __call__(self, request: HttpRequest) -> Host | ingest.SamplesAuth:
        # Overridden so a missing or malformed header is the house 401 too, not ninja's default.
        if self.lean:
            return ingest.samples_auth(request.headers.get("Authorization"))
        return ingest.host_for_token(request.headers.get("Authorization"))

    def authenticate(self, request: HttpRequest, token: str) -> Host:  # pragma: no cover
        return ingest.host_for_token(f"Bearer {token}")


host_token = HostToken()
# POST /samples, several times a minute from every host: request.auth is only the token's hash
# (ingest.samples_auth), which the statement storing the batch checks again. Same class, so the
# OpenAPI schema names the same `HostToken` scheme.
host_token_for_samples = HostToken(lean=True)


def host_by_token(token: str) -> Host | None:
    """The host whose token this is (revoked tokens no longer match), with its team."""
    return Host.objects.filter(token_hash=hash_token(token)).select_related("team").first()


# Endpoints an application or the host agent calls: request.auth is a teams.auth.Caller for the
# team, or for the host's team when a host token was sent.
team_or_host_token_auth = TeamTokenAuth(host_lookup=host_by_token)
