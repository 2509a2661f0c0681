"""Hostile bodies are refused quickly with the documented error shape, never a 500.

100,000 nested '[' gzip to a few hundred bytes; Python's json module (the slow path used to name a
NaN's field) recursed until RecursionError. An oversized gzip body on the unauthenticated enroll
endpoint used to be inflated to 64 MiB and parsed before being refused.
"""

from __future__ import annotations

import base64
import gzip
import os
import time

import orjson
import pytest

from tests.support.factories import make_host

DEEP = b"[" * 100_000


def _post(client, path: str, body: bytes, token: str | None = None):
    extra = {"HTTP_CONTENT_ENCODING": "gzip"}
    if token:
        extra["HTTP_AUTHORIZATION"] = f"Bearer {token}"
    return client.post(path, gzip.compress(body), content_type="application/json", **extra)


@pytest.mark.parametrize("path", ["/api/v1/enroll", "/api/v1/samples", "/api/v1/inventory",
                                  "/api/v1/host-energy"])
def test_deeply_nested_json_is_a_400_naming_the_problem(client, team, path):
    _, token = make_host(team)
    body = DEEP
    assert len(gzip.compress(body)) < 1000  # the attack costs the sender nothing
    response = _post(client, path, body, token)
    assert response.status_code == 400, response.content
    doc = response.json()
    assert doc["error"] == "malformed_json"
    assert set(doc) == {"error", "field", "message"}


def test_deeply_nested_json_with_a_nan_inside_is_still_a_400(client, team):
    _, token = make_host(team)
    body = b"[" * 5000 + b"NaN" + b"]" * 5000  # orjson refuses it; the slow path must too
    response = _post(client, "/api/v1/samples", body, token)
    assert response.status_code == 400
    assert response.json()["error"] == "malformed_json"


def test_oversized_enroll_body_is_refused_before_it_is_inflated(client, db, settings):
    # Random padding does not compress: the gzip body itself is over the small-body limit.
    doc = {"token": "gen_x", "hostname": "h", "pad": base64.b64encode(os.urandom(600_000)).decode()}
    body = gzip.compress(orjson.dumps(doc), compresslevel=9)
    assert len(body) > settings.SMALL_BODY_MAX_BYTES
    started = time.monotonic()
    response = client.post("/api/v1/enroll", body, content_type="application/json",
                           HTTP_CONTENT_ENCODING="gzip")
    assert response.status_code == 413
    assert response.json()["error"] == "too_large"
    assert time.monotonic() - started < 1.0


def test_small_gzip_bomb_on_enroll_stops_at_the_small_limit(client, db, settings):
    # Under the compressed limit, but inflating far past it: stopped at SMALL_BODY_MAX_BYTES.
    body = gzip.compress(b" " * (8 * 1024 * 1024), compresslevel=9)
    assert len(body) < settings.SMALL_BODY_MAX_BYTES
    response = client.post("/api/v1/enroll", body, content_type="application/json",
                           HTTP_CONTENT_ENCODING="gzip")
    assert response.status_code == 413
    assert response.json()["error"] == "too_large"
