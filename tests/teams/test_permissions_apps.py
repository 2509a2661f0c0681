"""The team permission matrix on every page and API endpoint of the dashboards, workloads, kpis,
costs and carbon apps, checked for every role plus an outsider.

Expected minimum roles are written out here by hand (not read from MATRIX), so a change to the
policy has to be made twice: once in greenops/teams/permissions.py and once, deliberately, here.
Helpers and the role/outsider pattern come from tests/teams/test_permissions.py.
"""

from __future__ import annotations

import inspect
import json

import pytest
from django.core.files.uploadedfile import SimpleUploadedFile
from django.utils import timezone

from greenops.benchmarks.runs import store_run
from greenops.teams.models import ApiToken, AuditEvent
from greenops.teams.permissions import MATRIX, ROLE_ORDER
from tests.support.benchmarks import run_doc
from tests.support.carbon import V2_CSV
from tests.support.permissions import ROLES, _patterns


def _csv_upload() -> dict:
    # A fresh file per request: an uploaded file object is read to its end by the first one.
    return {"file": SimpleUploadedFile("emissions.csv", V2_CSV.encode(), content_type="text/csv")}


def _first_gpu_id() -> int:
    from greenops.telemetry.models import Gpu

    return Gpu.objects.order_by("id").values_list("id", flat=True).first()


# (id, method, path, minimum role, status when allowed, body)
PAGES = [
    ("dashboard", "get", "/teams/{slug}/", "viewer", 200, None),
    ("host-detail", "get", "/teams/{slug}/hosts/{host}/", "viewer", 200, None),
    ("workloads", "get", "/teams/{slug}/workloads/", "viewer", 200, None),
    ("workload-new-form", "get", "/teams/{slug}/workloads/new/", "admin", 200, None),
    ("workload-new", "post", "/teams/{slug}/workloads/new/", "admin", 302,
     {"name": "Image Ranker", "kind": "inference"}),
    ("workload-edit-form", "get", "/teams/{slug}/workloads/{workload}/edit/", "admin", 200, None),
    ("workload-edit", "post", "/teams/{slug}/workloads/{workload}/edit/", "admin", 302,
     {"name": "Ranker", "slug": "ranker", "kind": "batch"}),
    ("workload-gpus", "get", "/teams/{slug}/workloads/{workload}/gpus/", "viewer", 200, None),
    ("workload-gpu-add", "post", "/teams/{slug}/workloads/{workload}/gpus/add/", "admin", 302,
     lambda: {"gpu": _first_gpu_id()}),
    ("pods", "get", "/teams/{slug}/workloads/pods/", "viewer", 200, None),
    ("namespace-map", "post", "/teams/{slug}/workloads/pods/namespaces/", "admin", 302,
     {"namespace": "ml-serve", "team": "vision"}),
    ("namespace-unmap", "post", "/teams/{slug}/workloads/pods/namespaces/{mapping}/delete/",
     "admin", 302, None),
    ("api-tokens", "get", "/teams/{slug}/api-tokens/", "admin", 200, None),
    ("api-token-create", "post", "/teams/{slug}/api-tokens/", "admin", 200, {"name": "ci"}),
    ("api-token-revoke", "post", "/teams/{slug}/api-tokens/{token}/revoke/", "admin", 302, {}),
    ("kpis", "get", "/teams/{slug}/kpis/", "viewer", 200, None),
    ("kpis-workload", "get", "/teams/{slug}/kpis/workloads/{workload}/", "viewer", 200, None),
    ("kpis-job", "get", "/teams/{slug}/kpis/jobs/{job}/", "viewer", 200, None),
    ("costs", "get", "/teams/{slug}/costs/", "viewer", 200, None),
    ("carbon-runs", "get", "/teams/{slug}/carbon/runs/", "viewer", 200, None),
    ("carbon-upload", "post", "/teams/{slug}/carbon/runs/upload", "member", 302, _csv_upload),
    ("carbon-sites", "get", "/teams/{slug}/carbon/sites/", "viewer", 200, None),
    ("benchmarks", "get", "/teams/{slug}/benchmarks/", "viewer", 200, None),
    ("advisor-compare", "get", "/teams/{slug}/advisor/compare/", "viewer", 200, None),
    ("advisor-workload", "get", "/teams/{slug}/advisor/workloads/{workload}/", "viewer", 200,
     None),
    ("advisor-pairs", "get", "/teams/{slug}/advisor/variants/", "viewer", 200, None),
    ("advisor-pair", "get", "/teams/{slug}/advisor/variants/{pair}/", "viewer", 200, None),
    ("advisor-pair-new", "post", "/teams/{slug}/advisor/variants/new", "member", 302,
     {"label": "batch 8 vs 32", "a": "ranker", "a_start": "2026-11-20T00:00",
      "a_end": "2026-11-20T06:00", "b": "ranker"}),
    ("advisor-pair-delete", "post", "/teams/{slug}/advisor/variants/{pair}/delete", "member",
     302, {}),
    ("benchmark-history", "get", "/teams/{slug}/benchmarks/{workload}/", "viewer", 200, None),
    ("benchmark-run", "get", "/teams/{slug}/benchmarks/runs/{run}/", "viewer", 200, None),
    ("benchmark-ack", "post", "/teams/{slug}/benchmarks/runs/{run}/acknowledge/", "member", 302,
     {"kpi": "energy_per_inference_j", "reason": "bigger model, agreed in review"}),
    ("host-edit-form", "get", "/teams/{slug}/hosts/{host}/edit/", "admin", 200, None),
    ("host-edit", "post", "/teams/{slug}/hosts/{host}/edit/", "admin", 302,
     {"provider": "aws", "region": "us-east-1", "instance_type": "p4d.24xlarge",
      "purchase_option": "spot", "country": "USA", "site": ""}),
    ("prices", "get", "/teams/{slug}/costs/prices/", "viewer", 200, None),
    ("price-add", "post", "/teams/{slug}/costs/prices/new", "admin", 302,
     {"kind": "discount", "discount_pct": "10", "source": "EDP contract",
      "valid_from": "2026-11-01 00:00"}),
    ("price-end", "post", "/teams/{slug}/costs/prices/{override}/end", "admin", 302, {}),
    ("site-new-form", "get", "/teams/{slug}/carbon/sites/new/", "admin", 200, None),
    ("site-new", "post", "/teams/{slug}/carbon/sites/new/", "admin", 302,
     {"name": "Frankfurt", "pue": "1.2", "country": "DEU"}),
    ("site-edit", "post", "/teams/{slug}/carbon/sites/{site}/edit/", "admin", 302,
     {"name": "Main DC", "pue": "1.3"}),
]
API = [
    ("api-usage", "get", "/api/v1/teams/{slug}/usage", "viewer", 200, None),
    ("api-workloads", "get", "/api/v1/teams/{slug}/workloads", "viewer", 200, None),
    ("api-pods", "get", "/api/v1/teams/{slug}/pods", "viewer", 200, None),
    ("api-workload-new", "post", "/api/v1/teams/{slug}/workloads", "admin", 201,
     {"name": "Image Ranker", "kind": "inference"}),
    ("api-kpis", "get", "/api/v1/teams/{slug}/kpis", "viewer", 200, None),
    ("api-metrics", "get", "/api/v1/teams/{slug}/metrics", "viewer", 200, None),
    ("api-recommendations", "get", "/api/v1/teams/{slug}/recommendations", "viewer", 200, None),
    ("api-costs", "get", "/api/v1/teams/{slug}/costs", "viewer", 200, None),
    ("api-benchmark-ack", "post", "/api/v1/teams/{slug}/benchmarks/runs/{run}/acknowledge",
     "member", 201, {"kpi": "energy_per_inference_j", "reason": "bigger model"}),
]
CASES = PAGES + API
IDS = [c[0] for c in CASES]


@pytest.fixture
def things(team, host):
    """One of each object the paths name: a host, a workload, a training job, an API token."""
    from greenops.workloads.models import TrainingJob, Workload

    workload = Workload.objects.create(team=team, name="Ranker", slug="ranker", kind="inference")
    job = TrainingJob.objects.create(team=team, workload=workload, name="run 1",
                                     started_at=timezone.now())
    token, _ = ApiToken.issue(team, "deploy")
    run, _ = store_run(team, run_doc(regress_pct=20.0))
    from greenops.carbon.models import Site
    from greenops.costs.overrides import PriceOverride

    override = PriceOverride.objects.create(team=team, kind="discount", discount_pct=5,
                                            source="old contract")
    site = Site.objects.create(team=team, name="Main DC", pue=1.4)
    import datetime as dt

    from greenops.advisor.models import VariantPair

    now = timezone.now()
    pair = VariantPair.objects.create(team=team, label="fp16 vs int8", a_workload=workload,
                                      b_workload=workload, a_start=now,
                                      a_end=now + dt.timedelta(hours=1))
    from greenops.workloads.models import NamespaceTeam

    mapping = NamespaceTeam.objects.create(owner=team, namespace="ml-train", team=team)
    return {"host": host[0].id, "workload": workload.slug, "job": job.id, "token": token.id,
            "run": run.id, "override": override.id, "site": site.id, "pair": pair.id,
            "mapping": mapping.id}


def _path(template: str, team, things) -> str:
    return template.format(slug=team.slug, **things)


def _call(client, method: str, path: str, body):
    body = body() if callable(body) else body
    if method == "get":
        return client.get(path)
    if path.startswith("/api/"):
        return client.post(path, json.dumps(body or {}), content_type="application/json")
    return client.post(path, body or {})


@pytest.mark.parametrize("role", ROLES)
@pytest.mark.parametrize("case", CASES, ids=IDS)
def test_every_role_on_every_page_and_endpoint(client, team_roles, team, things, role, case):
    name, method, template, min_role, ok_status, body = case
    path = _path(template, team, things)
    client.force_login(team_roles[role])
    resp = _call(client, method, path, body)
    if role == "outsider":
        assert resp.status_code == 404, (name, resp.status_code)  # not even its existence
    elif ROLE_ORDER.index(role) >= ROLE_ORDER.index(min_role):
        assert resp.status_code == ok_status, (name, role, resp.status_code)
    else:
        assert resp.status_code == 403, (name, role, resp.status_code)
        if path.startswith("/api/"):
            assert resp.json()["error"] == "forbidden"
            assert min_role in resp.json()["message"]


@pytest.mark.parametrize("case", CASES, ids=IDS)
def test_anonymous_is_sent_to_login_or_401(client, team, things, case):
    name, method, template, *_, body = case
    path = _path(template, team, things)
    resp = _call(client, method, path, body)
    if path.startswith("/api/"):
        assert resp.status_code == 401, name
    else:
        assert resp.status_code == 302 and resp["Location"].startswith("/login/"), name


def test_refused_writes_store_nothing(client, team_roles, team, things):
    from greenops.carbon.models import Run
    from greenops.workloads.models import Workload

    client.force_login(team_roles["member"])
    paths = {c[0]: _path(c[2], team, things) for c in CASES}
    for name in ("workload-new", "workload-edit", "api-workload-new"):
        case = next(c for c in CASES if c[0] == name)
        assert _call(client, "post", paths[name], case[5]).status_code == 403, name
    assert list(Workload.objects.values_list("slug", "kind")) == [("ranker", "inference")]
    assert client.post(paths["api-token-create"], {"name": "sneaky"}).status_code == 403
    assert client.post(paths["api-token-revoke"]).status_code == 403
    assert list(ApiToken.objects.values_list("name", "revoked_at")) == [("deploy", None)]
    client.force_login(team_roles["viewer"])
    assert client.post(paths["carbon-upload"], _csv_upload()).status_code == 403
    assert not Run.objects.exists()
    assert not AuditEvent.objects.exists()


def test_allowed_upload_stores_the_runs(client, team_roles, team):
    from greenops.carbon.models import Run

    client.force_login(team_roles["member"])
    resp = client.post(f"/teams/{team.slug}/carbon/runs/upload", _csv_upload())
    assert resp.status_code == 302 and Run.objects.filter(team=team).count() == 2


def test_token_create_and_revoke_are_audited_once(client, team_roles, team):
    admin = team_roles["admin"]
    client.force_login(admin)
    assert client.post(f"/teams/{team.slug}/api-tokens/", {"name": "ci"}).status_code == 200
    token = ApiToken.objects.get(team=team, name="ci")
    created = AuditEvent.objects.get(action="token.created")
    assert (created.team, created.actor, created.target) == (team, admin, str(token))
    # Tokens made without choosing keep the pre-scope meaning: ingest, no expiry.
    assert created.detail == {"token_id": token.id, "scope": "ingest", "expires_at": None}
    url = f"/teams/{team.slug}/api-tokens/{token.id}/revoke/"
    assert client.post(url).status_code == 302
    assert client.post(url).status_code == 302  # a double click revokes (and records) nothing
    revoked = AuditEvent.objects.filter(action="token.revoked")
    assert [(e.actor, e.target) for e in revoked] == [(admin, str(token))]
    assert AuditEvent.objects.count() == 2


def test_token_name_missing_is_not_audited(client, team_roles, team):
    client.force_login(team_roles["owner"])
    assert client.post(f"/teams/{team.slug}/api-tokens/", {"name": " "}).status_code == 400
    assert not ApiToken.objects.exists() and not AuditEvent.objects.exists()


@pytest.mark.parametrize(("role", "shown"), [("admin", True), ("member", False)])
def test_pages_offer_only_what_the_role_may_do(client, team_roles, team, role, shown):
    client.force_login(team_roles[role])
    html = client.get(f"/teams/{team.slug}/workloads/").content.decode()
    assert ("Register a workload" in html or "Register one" in html) is shown


@pytest.mark.parametrize(("role", "shown"), [("member", True), ("viewer", False)])
def test_runs_page_offers_upload_only_to_members(client, team_roles, team, role, shown):
    client.force_login(team_roles[role])
    html = client.get(f"/teams/{team.slug}/carbon/runs/").content.decode()
    assert (f"/teams/{team.slug}/carbon/runs/upload" in html) is shown


TOKEN_ENDPOINTS = [
    ("post", "/api/v1/training-jobs"),
    ("post", "/api/v1/inference"),
    ("post", "/api/v1/codecarbon/emissions-csv"),
    ("post", "/api/v1/benchmarks/runs"),
    ("get", "/api/v1/benchmarks/baseline?workload=ranker&branch=main&hardware_key=x"),
]


@pytest.mark.parametrize(("method", "path"), TOKEN_ENDPOINTS)
def test_machine_endpoints_want_a_token_not_a_session(client, team_roles, method, path):
    """Applications use team API tokens; even an owner's browser session is not one."""
    client.force_login(team_roles["owner"])
    assert _call(client, method, path, {}).status_code == 401


def _team_url_modules():
    from dashboards import urls as dashboards_urls
    from greenops.advisor import urls as advisor_urls
    from greenops.benchmarks import urls as benchmarks_urls
    from greenops.carbon import urls as carbon_urls
    from greenops.costs import urls as costs_urls
    from greenops.kpis import urls as kpis_urls
    from greenops.workloads import urls as workloads_urls

    # The apps' url modules are mounted under teams/<slug>/; dashboards' team pages carry it.
    for module in (workloads_urls, kpis_urls, costs_urls, carbon_urls, benchmarks_urls,
                   advisor_urls, dashboards_urls):
        for pattern in _patterns(module.urlpatterns):
            route = str(pattern.pattern)
            if module is dashboards_urls and "<slug:slug>" not in route:
                continue  # home and healthz belong to no team
            yield "/teams/{slug}/" + route.replace("teams/<slug:slug>/", ""), pattern


def test_every_team_page_of_these_apps_is_guarded_by_the_matrix():
    """A new team page without @team_permission fails here."""
    for route, pattern in _team_url_modules():
        action = getattr(pattern.callback, "permission_action", None)
        assert action in MATRIX, f"{route} is not guarded by team_permission"


def test_case_list_covers_every_team_page():
    covered = {c[2].replace("{slug}", "").split("{")[0] for c in PAGES}
    for route, _pattern in _team_url_modules():
        prefix = route.replace("{slug}", "").split("<")[0]
        assert prefix in covered, f"{route} has no permission test"


def _session_team_operations():
    from ninja.security import SessionAuth

    from greenops.api.v1 import api
    from greenops.teams.api_tokens import TeamAuth

    for _prefix, router in api._routers:
        for path, view in router.path_operations.items():
            for op in view.operations:
                if "{slug}" in path and any(isinstance(a, SessionAuth | TeamAuth)
                                          for a in op.auth_callbacks):
                    yield path, op


def test_every_team_endpoint_of_these_apps_checks_the_matrix_and_is_tested():
    modules = {"greenops.api.v1", "greenops.workloads.api", "greenops.kpis.api",
               "greenops.costs.api", "greenops.carbon.api", "greenops.benchmarks.api"}
    covered = {(c[1].upper(), c[2].removeprefix("/api/v1")) for c in API}
    seen = 0
    for path, op in _session_team_operations():
        if op.view_func.__module__ not in modules:
            continue  # teams and hosts endpoints: tests/teams/test_permissions.py
        seen += 1
        source = inspect.getsource(op.view_func)
        assert "authorize_api(" in source or "authorize_caller(" in source, path
        for method in op.methods:
            assert (method, path) in covered, f"{method} {path} has no permission test"
    assert seen == len(API)
