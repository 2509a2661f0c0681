"""Every 4xx and 5xx under /api/ is {error, field, message} (issue 30): the ones Django and
django-ninja answered themselves -- 405 as plain text, HTML 400 and 404, HTML 500 -- included."""

from __future__ import annotations

import orjson
import pytest

KEYS = {"error", "field", "message"}


def _shape(r) -> dict:
    assert r["Content-Type"].startswith("application/json"), (r.status_code, r.content[:200])
    body = orjson.loads(r.content)
    assert set(body) == KEYS, body
    return body


def test_a_wrong_method_is_a_json_405_keeping_allow(client, db):
    r = client.delete("/api/v1/time")
    assert r.status_code == 405
    assert _shape(r)["error"] == "method_not_allowed"
    assert "GET" in r["Allow"] and "GET" in _shape(r)["message"]


def test_an_unknown_api_path_is_a_json_404(client, db):
    for path in ("/api/v1/no-such-thing", "/api/v2/samples", "/api/"):
        r = client.get(path)
        assert r.status_code == 404, path
        assert _shape(r)["error"] == "not_found"


def test_a_refused_host_header_is_a_json_400(client, db):
    # Django's DisallowedHost: an HTML 400 page before this (ALLOWED_HOSTS in the tests).
    r = client.get("/api/v1/time", HTTP_HOST="evil.example")
    assert r.status_code == 400
    assert _shape(r)["error"] == "bad_request"


def test_a_crash_is_a_json_500_that_says_nothing_of_its_cause(client, db, monkeypatch):
    from greenops.telemetry import api_enroll

    def boom(*args, **kwargs):
        raise RuntimeError("secret detail")

    client.raise_request_exception = False
    monkeypatch.setattr(api_enroll, "time", type("Clock", (), {"time": staticmethod(boom)}))
    r = client.get("/api/v1/time")
    assert r.status_code == 500
    body = _shape(r)
    assert body["error"] == "server_error" and "secret" not in r.content.decode()


def test_pages_outside_the_api_keep_their_html(client, db):
    r = client.get("/no-such-page/")
    assert r.status_code == 404 and not r["Content-Type"].startswith("application/json")


@pytest.mark.parametrize("status", [400, 404, 405, 413, 429, 503])
def test_the_codes_the_issue_names_have_a_code(status):
    from greenops.api.errorshape import CODES

    assert status in CODES


def test_a_nul_that_reaches_postgresql_is_a_422_not_a_500(client, users, team, rf):
    """Found by the negative schemathesis run: a NUL in an alert rule reached PostgreSQL ("text
    fields cannot contain NUL"), a 500. The alerts app now refuses it itself, naming the field;
    any DataError that still gets through is the client's data too: a 422 in the house shape,
    the database's words not echoed."""
    from django.db import DataError

    from greenops.api.error_answers import on_data_error

    client.force_login(users["owner"])
    r = client.post(f"/api/v1/teams/{team.slug}/alerts", orjson.dumps(
        {"name": "Spend \u0000", "kind": "budget", "kpi": "cost_usd", "fire_level": 500}),
        content_type="application/json")
    assert r.status_code == 422, r.content
    assert _shape(r)["error"] == "validation_error" and _shape(r)["field"] == "name"
    assert "PostgreSQL" not in r.content.decode()
    # The net under every app: a DataError raised by the database becomes this answer.
    answer = on_data_error(rf.post("/api/v1/anything"),
                           DataError("PostgreSQL text fields cannot contain NUL (0x00) bytes"))
    assert answer.status_code == 422
    body = orjson.loads(answer.content)
    assert body["error"] == "validation_error" and set(body) == {"error", "field", "message"}
    assert "does not fit what the server stores" in body["message"]
    assert "PostgreSQL" not in body["message"]


def test_the_codecarbon_api_declares_its_token_and_error_shape():
    from greenops.carbon.codecarbon_api import api as codecarbon

    schema = codecarbon.get_openapi_schema()
    assert schema["components"]["securitySchemes"]["CodecarbonToken"]["name"] == "x-api-token"
    for path, operations in schema["paths"].items():
        for method, op in operations.items():
            assert op["security"] == [{"CodecarbonToken": []}], (method, path)
            assert op["responses"]["default"]["content"]["application/json"]["schema"] == {
                "$ref": "#/components/schemas/Error"}


def test_a_codecarbon_body_that_is_not_json_is_a_house_400(client, team):
    from greenops.teams.models import ApiToken

    token = ApiToken.issue(team, "cc")[1]
    r = client.post("/api/codecarbon/runs", b"\x00", content_type="application/json",
                    HTTP_X_API_TOKEN=token)
    assert r.status_code == 400
    assert _shape(r)["error"] == "malformed_json"
