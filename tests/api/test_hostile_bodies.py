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


def _bomb() -> tuple[bytes, int]:
    """A batch-shaped JSON body of 62 MiB that gzips to 284 KB (issue 30's measurement): a
    column of 50 random timestamps-sized numbers repeated, so it compresses about 229:1."""
    import random

    rng = random.Random(30)
    cycle = b",".join(str(rng.randint(10**8, 10**9 - 1)).encode() for _ in range(50))
    reps = (62 * 1024 * 1024) // (len(cycle) + 1) + 1
    raw = b'{"batch_id":"6f1c8f8e-8c4f-4a57-9d1f-4f3f1c2b8e11","source":"nvml","samples":' \
          b'{"ts":[' + b",".join([cycle] * reps) + b"]}}"
    return gzip.compress(raw, compresslevel=6), len(raw)


BOMB_PATHS = ["/api/v1/samples", "/api/v1/host-samples", "/api/v1/host-energy",
              "/api/v1/inference", "/api/v1/training-jobs", "/api/v1/benchmarks/runs"]


@pytest.fixture(scope="module")
def bomb():
    body, inflated = _bomb()
    # 62 MiB of JSON from a ~284 KB POST: a cost of 220 to 1 for whoever answers it.
    assert inflated >= 62 * 1024 * 1024
    assert 200_000 < len(body) < 400_000, len(body)
    return body


@pytest.mark.parametrize("path", BOMB_PATHS)
def test_a_62_mib_gzip_body_is_refused_in_under_a_second_and_50_mb(client, team, bomb, path):
    """Each operation stops decompressing at its own cap (greenops/body_limits.py), before any
    parsing: 413 in < 1 s and < 50 MB of extra memory, where it used to hold a worker 15-18 s
    and 600 MB (inflated to 62 MiB under the one 64 MiB cap, then parsed)."""
    import tracemalloc

    from greenops import body_limits as limits

    _, token = make_host(team)
    post = lambda: client.post(path, bomb, content_type="application/json",  # noqa: E731
                               HTTP_CONTENT_ENCODING="gzip", HTTP_AUTHORIZATION=f"Bearer {token}")
    started = time.perf_counter()
    response = post()
    elapsed = time.perf_counter() - started
    assert response.status_code == 413, response.content
    doc = response.json()
    assert doc["error"] == "too_large" and set(doc) == {"error", "field", "message"}
    assert f"{limits.decompressed_cap(path)}" in doc["message"]
    assert elapsed < 1.0, elapsed
    tracemalloc.start()
    try:
        assert post().status_code == 413
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert peak < 50 * 1024 * 1024, peak
    print(f"{path}: 413 in {elapsed * 1000:.0f} ms, peak {peak / 2**20:.1f} MiB traced")


def test_every_operation_has_a_cap_at_most_the_samples_one(settings):
    from greenops import body_limits as limits

    assert limits.decompressed_cap("/api/v1/samples") == settings.INGEST_MAX_DECOMPRESSED_BYTES
    assert limits.decompressed_cap("/api/v1/enroll") == settings.SMALL_BODY_MAX_BYTES
    assert limits.decompressed_cap("/api/v1/teams/x/alerts") == settings.API_BODY_MAX_BYTES
    # The sample limit is reachable: 20,000 samples of every column at full precision are
    # ~390 bytes each (7.4 MiB), inside the 8 MiB cap.
    assert settings.INGEST_MAX_SAMPLES * 390 < settings.INGEST_MAX_DECOMPRESSED_BYTES
