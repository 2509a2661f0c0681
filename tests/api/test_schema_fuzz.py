"""Every API error in the one documented {error, field, message} shape, every operation's
security and body declared in the OpenAPI schema, and schemathesis against that schema with each
identity an API caller can have (host token, team API token, session): no 5xx, and every answer
matches what the schema says."""

from __future__ import annotations

import datetime as dt
import re
import secrets
import time
import uuid
from collections import Counter

import orjson
import pytest
import schemathesis
from django.core.wsgi import get_wsgi_application
from django.utils import timezone
from hypothesis import HealthCheck, given, settings
from hypothesis.errors import Unsatisfiable
from schemathesis.checks import (
    content_type_conformance,
    not_a_server_error,
    positive_data_acceptance,
    response_schema_conformance,
    status_code_conformance,
)
from schemathesis.generation import GenerationMode

from greenops.alerts import rules
from greenops.alerts.models import Rule
from greenops.api.v1 import api
from greenops.benchmarks.models import BenchmarkRun
from greenops.reports.models import Report
from greenops.teams.models import ApiToken
from greenops.workloads.models import TrainingJob, Workload
from tests.support.factories import make_host

ERROR_KEYS = {"error", "field", "message"}


def _error(r) -> dict:
    body = r.json()
    assert set(body) == ERROR_KEYS, body
    return body


# --- error shapes: the ninja-raised errors that answered {"detail": ...} before ---------------

def test_session_endpoint_without_login_is_a_house_401(client, team):
    body = _error(client.get(f"/api/v1/teams/{team.slug}/usage"))
    assert body["error"] == "unauthorized" and body["field"] == "sessionid"


def test_session_post_without_csrf_token_is_a_house_403(users, team):
    from django.test import Client

    c = Client(enforce_csrf_checks=True)
    c.force_login(users["owner"])
    r = c.post(f"/api/v1/teams/{team.slug}/workloads", b"{}", content_type="application/json")
    assert r.status_code == 403
    assert _error(r) == {"error": "csrf_failed", "field": "X-CSRFToken",
                         "message": "send the csrftoken cookie's value as X-CSRFToken"}


def test_a_path_parameter_of_the_wrong_type_names_the_parameter(client, team):
    token = ApiToken.issue(team, "app")[1]
    r = client.get("/api/v1/training-jobs/not-a-number", HTTP_AUTHORIZATION=f"Bearer {token}")
    assert r.status_code == 422
    body = _error(r)
    assert body["error"] == "validation_error" and body["field"] == "job_id"


def test_a_missing_query_parameter_names_the_parameter(client, team):
    token = ApiToken.issue(team, "app")[1]
    r = client.get("/api/v1/benchmarks/baseline?workload=w&branch=main",
                   HTTP_AUTHORIZATION=f"Bearer {token}")
    assert r.status_code == 422
    assert _error(r)["field"] == "hardware_key"


def test_host_token_endpoints_refuse_a_missing_token_in_house_shape(client, db):
    for path in ("/api/v1/samples", "/api/v1/inventory", "/api/v1/host-energy"):
        r = client.post(path, b"{}", content_type="application/json")
        assert r.status_code == 401, path
        assert _error(r)["field"] == "Authorization"
    r = client.get("/api/v1/agent/whoami", HTTP_AUTHORIZATION="Bearer gho_wrong")
    assert r.status_code == 401 and _error(r)["message"] == "unknown or revoked host token"


def test_a_nul_in_an_inference_workload_slug_is_a_422_not_a_500(client, team):
    """Found by the schemathesis run below: the slug reached PostgreSQL, which refuses NUL."""
    token = ApiToken.issue(team, "app")[1]
    doc = {"batch_id": "134cba8e-7ea5-2eba-93db-0ac2233ceda3",
           "windows": [{"workload": "B\u0000x", "end": time.time() - 10, "requests": 1}]}
    r = client.post("/api/v1/inference", orjson.dumps(doc), content_type="application/json",
                    HTTP_AUTHORIZATION=f"Bearer {token}")
    assert r.status_code == 422, r.content
    assert _error(r)["field"] == "windows[0].workload"


def test_codecarbon_api_refuses_nul_and_stores_far_offsets_in_utc(client, team):
    """Found by the codecarbon schemathesis run below: both reached PostgreSQL and were 500s."""
    token = ApiToken.issue(team, "cc")[1]
    r = client.post("/api/codecarbon/experiments", orjson.dumps({"name": "a\u0000b"}),
                    content_type="application/json", HTTP_X_API_TOKEN=token)
    assert r.status_code == 422, r.content
    assert _error(r)["field"] == "name"
    # -20:24 is a valid offset for Python, not for PostgreSQL (+-15:59): 11:49:43-20:24 is
    # 08:13:43 UTC the next day.
    r = client.post("/api/codecarbon/runs", orjson.dumps(
        {"timestamp": "2026-09-02T11:49:43-20:24",
         "experiment_id": "5b4f0a4e-8f9c-4d8e-9a57-0c7f3c1d2e11"}),
        content_type="application/json", HTTP_X_API_TOKEN=token)
    assert r.status_code == 201, r.content
    assert r.json()["timestamp"].startswith("2026-09-03T08:13:43")
    r = client.post("/api/codecarbon/runs", orjson.dumps(
        {"timestamp": "0001-01-01T00:00:00+01:00",
         "experiment_id": "5b4f0a4e-8f9c-4d8e-9a57-0c7f3c1d2e11"}),
        content_type="application/json", HTTP_X_API_TOKEN=token)
    assert r.status_code == 422 and _error(r)["field"] == "timestamp"


def test_codecarbon_api_refuses_a_cpu_count_beyond_its_column(client, team):
    """Found by the codecarbon schemathesis run: 2**31 CPUs reached PostgreSQL's 32-bit column
    ("integer out of range") and answered 500. The largest count the column holds is stored."""
    token = ApiToken.issue(team, "cc")[1]
    exp = "5b4f0a4e-8f9c-4d8e-9a57-0c7f3c1d2e11"
    for field in ("cpu_count", "gpu_count"):
        r = client.post("/api/codecarbon/runs", orjson.dumps(
            {"timestamp": "2026-09-02T11:49:43Z", "experiment_id": exp, field: 2**31}),
            content_type="application/json", HTTP_X_API_TOKEN=token)
        assert r.status_code == 422, r.content
        assert _error(r)["field"] == field
        r = client.post("/api/codecarbon/runs", orjson.dumps(
            {"timestamp": "2026-09-02T11:49:43Z", "experiment_id": exp, field: 2**31 - 1}),
            content_type="application/json", HTTP_X_API_TOKEN=token)
        assert r.status_code == 201, r.content


# --- declarations -------------------------------------------------------------------------------

BODYLESS = {  # operations that read no request body (their handlers never call json_body)
    ("post", "/api/v1/teams/{slug}/enrollment-tokens"),
    ("post", "/api/v1/teams/{slug}/hosts/{host_id}/revoke"),
    ("post", "/api/v1/teams/{slug}/hosts/{host_id}/rotate"),
}
PUBLIC = {("post", "/api/v1/enroll"), ("get", "/api/v1/time")}


def test_every_operation_declares_security_body_and_the_error_shape():
    schema = api.get_openapi_schema()
    schemes = schema["components"]["securitySchemes"]
    assert schemes["HostToken"] == {"type": "http", "scheme": "bearer",
                                    "description": schemes["HostToken"]["description"]}
    host_ops = set()
    for path, operations in schema["paths"].items():
        for method, op in operations.items():
            key = (method, path)
            assert ("requestBody" in op) == (method in ("post", "put") and key not in BODYLESS), key
            assert op["security"] or key in PUBLIC, key
            for requirement in op["security"]:
                assert set(requirement) <= set(schemes), key
                if "HostToken" in requirement:
                    host_ops.add(path)
            assert op["responses"]["default"]["content"]["application/json"]["schema"] == {
                "$ref": "#/components/schemas/Error"}, key
    assert {"/api/v1/samples", "/api/v1/inventory", "/api/v1/agent/whoami",
            "/api/v1/host-energy"} <= host_ops


# --- schemathesis -------------------------------------------------------------------------------

# Per operation (x 3 identities): 41 operations x 3 x 12 examples took ~40 s here, inside
# the ~2 minutes the suite allows it on the shared 2-core machine.
MAX_EXAMPLES = 12


# Valid data (the schema's) and invalid data (what it forbids: wrong types, missing fields).
MODES = (GenerationMode.POSITIVE, GenerationMode.NEGATIVE)


def run_mode(run, mode: GenerationMode) -> None:
    """An operation with no parameter and no body has no invalid input to make."""
    try:
        run()
    except Unsatisfiable:
        if mode is not GenerationMode.NEGATIVE:
            raise


def count(tally: Counter, status: int) -> None:
    tally["requests"] += 1
    tally[f"{status // 100}xx"] += 1


# Schema-valid data may still be refused for state the request cannot know (401/403 for the
# wrong identity, 404 for an object that does not exist, 409 for a conflict, 429): the rest of
# a 4xx to schema-valid data means the schema allows what the server refuses.
ACCEPTED_STATUSES = ["2xx", "401", "403", "404", "409", "429"]

# The rules JSON Schema cannot state, per operation: (the refused field, why the schema cannot
# say it). A 422 naming a field that matches is not a schema that lies; every other is.
UNSTATABLE = {
    "POST /api/v1/samples": [
        (r"samples\.\w+$", "columns of equal length (JSON Schema has no equal-length rule)"),
        (r"samples\.ts(\[\d+\])?$", "timestamps distinct per GPU and within the accepted age "
                                      "of now (a clock the schema does not have)"),
        (r"samples\.gpu_index\[\d+\]$", "a GPU the host's inventory registered (state)"),
        (r"samples\.energy_method\[\d+\]$", "consistent with that sample's energy columns"),
    ],
    "POST /api/v1/host-samples": [
        (r"samples\.\w+$", "columns of equal length"),
        (r"samples\.ts(\[\d+\])?$", "timestamps distinct and within the accepted age of now"),
    ],
    "POST /api/v1/host-energy": [
        (r"samples\.\w+$", "columns of equal length"),
        (r"samples\.ts(\[\d+\])?$", "timestamps distinct and within the accepted age of now"),
    ],
    "POST /api/v1/inventory": [
        (r"gpus\[\d+\]\.index$", "GPU indices distinct within the inventory"),
    ],
    "POST /api/v1/inference": [
        (r"windows\[\d+\]\.workload$", "a workload of the caller's team (state)"),
        (r"windows\[\d+\]\.end$", "within the accepted age of now"),
        (r"windows\[\d+\]\.latency(\.\w+)?$", "counts has len(le) + 1 entries, le "
                                                   "ascending (cross-field)"),
    ],
    "POST /api/v1/training-jobs": [
        (r"^(workload|host|gpus(\[\d+\])?)$", "a workload, host and GPUs of the caller's team; "
                                               "GPUs by index need the host (state)"),
    ],
    "POST /api/v1/teams/{slug}/workloads": [
        (r"^(slug|hosts\[\d+\]|gpus\[\d+\])$", "a slug no other workload of the team uses; "
                                                "hosts and GPUs of the team (state)"),
    ],
    "POST /api/v1/teams/{slug}/alerts": [
        (r"^(host|gpu|workload|channels)$", "a host, GPU, workload or channel of the team "
                                            "(state)"),
        (r"^(kpi|clear_level)$", "per-inference KPIs only for a workload or the team; "
                                 "clear_level on the far side of fire_level (cross-field)"),
    ],
    "PUT /api/v1/teams/{slug}/alerts/{rule_id}": [
        (r"^(host|gpu|workload|channels)$", "a host, GPU, workload or channel of the team "
                                            "(state)"),
        (r"^(kpi|clear_level)$", "per-inference KPIs only for a workload or the team; "
                                 "clear_level on the far side of fire_level (cross-field)"),
    ],
    "POST /api/v1/teams/{slug}/alerts/{rule_id}/silence": [
        (r"^until$", "a time PostgreSQL can hold once turned into UTC (0001-01-01T00:00+01:00 "
                     "is before year 1)"),
    ],
    "POST /api/v1/training-jobs/{job_id}/stop": [
        (r"^stopped_at$", "not before the job started, within the accepted age of now (state, "
                          "a clock the schema does not have)"),
    ],
    "POST /api/v1/teams/{slug}/benchmarks/runs/{run}/acknowledge": [
        (r"^kpi$", "a KPI the run failed on and nobody acknowledged yet (state)"),
        (r"^reason$", "not blank once Python strips it (str.strip's whitespace is not the "
                      "schema's)"),
    ],
    "GET /api/v1/teams/{slug}/kpis": [
        (r"^(start|end)$", "an ISO 8601 date or time, start and end together, end after start, "
                           "at most the longest window apart (cross-field)"),
        (r"^month$", "a month that has begun (a clock the schema does not have)"),
    ],
    "POST /api/codecarbon/runs": [
        (r"^timestamp$", "a time PostgreSQL can hold once turned into UTC (0001-01-01T00:00+01:00 "
                         "is before year 1)"),
    ],
    "POST /api/codecarbon/emissions": [
        (r"^timestamp$", "a time PostgreSQL can hold once turned into UTC (as the runs')"),
    ],
    "POST /api/v1/benchmarks/runs": [
        (r"workload$", "a workload of the caller's team (state)"),
        (r"samples(\[\d+\]\.index)?$", "one head repeat at least; (role, index) distinct"),
        (r"comparison(\.verdict)?$", "the verdict the gate gives for the samples"),
    ],
    "POST /api/v1/codecarbon/emissions-csv": [
        (r"^(file|line \d+.*)$", "the file's CSV content (the schema says only: a file)"),
    ],
}


def accepts_schema_valid_data(ctx, response, case) -> bool | None:
    """schemathesis' positive_data_acceptance, less the refusals UNSTATABLE lists."""
    if response.status_code == 422 and case.meta and case.meta.generation.mode.is_positive:
        field = (orjson.loads(response.content) or {}).get("field") or ""
        for pattern, _why in UNSTATABLE.get(case.operation.label, ()):
            if re.search(pattern, field):
                return None
    return positive_data_acceptance(ctx, response, case)


def fuzz_config() -> schemathesis.Config:
    config = schemathesis.Config()
    config.projects.default.checks.positive_data_acceptance.expected_statuses = \
        ACCEPTED_STATUSES
    return config


def report(name: str, operations: int, tally: Counter, failures: dict, seconds: float) -> None:
    """The run's figures, in the test log (-s) and for the closing note; then each failed
    check with one example."""
    print(f"schemathesis {name}: {operations} operations, {tally['requests']} requests, "
          f"{tally['2xx']} 2xx, {tally['4xx']} 4xx, {tally['5xx']} 5xx, "
          f"{tally['schema_breaking']} answers breaking the schema, "
          f"{tally['valid_refused']} schema-valid requests refused in {seconds:.0f} s")
    for (label, kind), example in sorted(failures.items()):
        print(f"  {kind}: {label}: {example}")


def validate(case, response, checks, tally: Counter, failures: dict) -> None:
    """Run the checks, counting what fails instead of stopping at the first (the test asserts
    the counts): a refused schema-valid request (ST202) or any other broken promise."""
    try:
        case.validate_response(response, checks=checks)
    except BaseException as exc:  # schemathesis' FailureGroup is a BaseExceptionGroup
        if not isinstance(exc, AssertionError | BaseExceptionGroup):
            raise
        text = str(exc)
        kind = "valid_refused" if "Schema-valid request rejected" in text else "schema_breaking"
        tally[kind] += 1
        failures.setdefault((case.operation.label, kind),
                            f"{response.status_code} {response.content[:160]!r} "
                            f"for body {str(case.body)[:160]} query {case.query}")


def house_error_shape(ctx, response, case) -> bool | None:
    """Every 4xx with a body is {error, field, message} (the README's one error form)."""
    if response.status_code >= 400 and response.content:
        assert response.headers.get("content-type", [""])[0].startswith("application/json"), (
            response.status_code, response.content[:300])
        body = orjson.loads(response.content)
        if not (isinstance(body, dict) and set(body) == ERROR_KEYS):
            raise AssertionError(f"{response.status_code} body is not {{error, field, message}}: "
                                 f"{body!r}")
    return None


@pytest.fixture
def wsgi_app():
    """Django's WSGI app inside the test's transaction: as django.test.Client does, keep the
    request signals from closing the test's database connection after each request."""
    from django.core.signals import request_finished, request_started
    from django.db import close_old_connections

    request_started.disconnect(close_old_connections)
    request_finished.disconnect(close_old_connections)
    try:
        yield get_wsgi_application()
    finally:
        request_started.connect(close_old_connections)
        request_finished.connect(close_old_connections)


def real_objects(team, workload) -> dict:
    """For each path parameter that names an object, a function giving one of the team's (made
    again after a fuzzed DELETE or stop), so every operation on it reaches its handler. A random
    id stops at the 404, and whether a random id met an object hung on the sequences, so a
    PUT to an alert rule was refused in one CI run and not in the runs before."""
    def first_or(queryset, make):
        return lambda: queryset.values_list("id", flat=True).first() or make().id

    now = timezone.now()
    return {
        "rule_id": first_or(Rule.objects.filter(team=team), lambda: rules.save(team, {
            "name": "Fuzzed", "kind": "threshold", "kpi": "gpu_util_pct", "window": "1h",
            "direction": "below", "fire_level": 5, "for_minutes": 0})),
        "host_id": first_or(team.hosts.filter(name="fuzz-target"),
                            lambda: make_host(team, "fuzz-target")[0]),
        "job_id": first_or(TrainingJob.objects.filter(team=team, stopped_at=None),
                           lambda: TrainingJob.objects.create(
                               team=team, workload=workload, name="Fuzzed", started_at=now)),
        "report_id": first_or(Report.objects.filter(team=team), lambda: Report.objects.create(
            team=team, month=dt.date(2026, 11, 1))),
        "run": first_or(BenchmarkRun.objects.filter(team=team), lambda: BenchmarkRun.objects.create(
            team=team, workload=workload, run_id=uuid.uuid4(), source="nvml", started_at=now,
            hardware={}, hardware_key="fuzz")),
        "workload": lambda: workload.slug,
    }


def test_schemathesis_finds_no_5xx_and_no_answer_outside_the_schema(team, users, wsgi_app):
    host, host_token = make_host(team)
    team_token = ApiToken.issue(team, "fuzz")[1]
    ranker = Workload.objects.create(team=team, name="Ranker", kind="inference")
    existing = real_objects(team, ranker)

    from django.test import Client

    c = Client()
    c.force_login(users["owner"])
    session = c.cookies["sessionid"].value
    csrf = secrets.token_hex(16)  # 32 characters: Django accepts the unmasked secret as header
    identities = {
        "host": ({"Authorization": f"Bearer {host_token}"}, {}),
        "team": ({"Authorization": f"Bearer {team_token}"}, {}),
        "session": ({"X-CSRFToken": csrf}, {"sessionid": session, "csrftoken": csrf}),
    }
    schema = schemathesis.openapi.from_wsgi("/api/v1/openapi.json", wsgi_app,
                                            config=fuzz_config())
    checks = [not_a_server_error, status_code_conformance, content_type_conformance,
              response_schema_conformance, house_error_shape, accepts_schema_valid_data]
    started = time.monotonic()
    operations = 0
    tally = Counter()
    failures = {}
    for result in schema.get_all_operations():
        operation = result.ok()
        operations += 1
        for mode in MODES:

            @given(case=operation.as_strategy(generation_mode=mode))
            @settings(max_examples=MAX_EXAMPLES, deadline=None, derandomize=True,
                      database=None, suppress_health_check=list(HealthCheck))
            def run(case):
                if "slug" in (case.path_parameters or {}):
                    case.path_parameters["slug"] = team.slug  # past the 404, into the handler
                for name in (case.path_parameters or {}).keys() & existing.keys():
                    case.path_parameters[name] = existing[name]()
                for headers, cookies in identities.values():
                    response = case.call(headers=headers, cookies=cookies)
                    count(tally, response.status_code)
                    validate(case, response, checks, tally, failures)

            run_mode(run, mode)
    assert operations >= 40
    report("api/v1", operations, tally, failures, time.monotonic() - started)
    assert tally["5xx"] == 0
    assert tally["schema_breaking"] == 0 and tally["valid_refused"] == 0, failures


def test_every_path_answers_an_undeclared_method_with_a_json_405(client, db):
    """What schemathesis' unsupported-method check sends: 678 answers were plain text."""
    schema = api.get_openapi_schema()
    for path, operations in schema["paths"].items():
        url = path.replace("{slug}", "x").replace("{rule_id}", "1").replace(
            "{job_id}", "1").replace("{host_id}", "1").replace("{run}", "1").replace(
            "{report_id}", "1")
        for method in {"get", "post", "put", "delete", "patch"} - set(operations):
            r = getattr(client, method)(url)
            assert r.status_code == 405, (method, path, r.status_code)
            assert r["Content-Type"].startswith("application/json"), (method, path)
            assert set(orjson.loads(r.content)) == ERROR_KEYS


def test_schemathesis_on_the_codecarbon_api(team, wsgi_app):
    """The same checks for /api/codecarbon/ (greenops/carbon/codecarbon_api.py), with the team
    token as codecarbon sends its api_key (x-api-token), as a Bearer header, and with none.
    Emissions go to a real run and the experiment read is a real one, so fuzzed values reach
    the handlers (a random id stops at the 404)."""
    team_token = ApiToken.issue(team, "codecarbon")[1]
    identities = [{"x-api-token": team_token}, {"Authorization": f"Bearer {team_token}"}, {}]
    import datetime as dt
    import uuid

    from greenops.carbon import runs

    experiment_id = uuid.uuid4()
    run_id = str(runs.create_client_run(team, experiment_id, dt.datetime.now(dt.UTC), {}).id)
    schema = schemathesis.openapi.from_wsgi("/api/codecarbon/openapi.json", wsgi_app,
                                            config=fuzz_config())
    checks = [not_a_server_error, status_code_conformance, content_type_conformance,
              response_schema_conformance, house_error_shape, accepts_schema_valid_data]
    operations = 0
    tally = Counter()
    failures = {}
    started = time.monotonic()
    for result in schema.get_all_operations():
        operation = result.ok()
        operations += 1
        for mode in MODES:

            @given(case=operation.as_strategy(generation_mode=mode))
            @settings(max_examples=MAX_EXAMPLES * 2, deadline=None, derandomize=True,
                      database=None, suppress_health_check=list(HealthCheck))
            def run(case):
                if isinstance(case.body, dict) and "run_id" in case.body:
                    case.body["run_id"] = run_id
                if "experiment_id" in (case.path_parameters or {}):
                    case.path_parameters["experiment_id"] = str(experiment_id)
                for headers in identities:
                    response = case.call(headers=headers)
                    count(tally, response.status_code)
                    validate(case, response, checks, tally, failures)

            run_mode(run, mode)
    assert operations == 4
    report("api/codecarbon", operations, tally, failures, time.monotonic() - started)
    assert tally["5xx"] == 0
    assert tally["schema_breaking"] == 0 and tally["valid_refused"] == 0, failures
