"""What the schemathesis run's positive-data check found: schemas that allowed what the server
refused, and the server answers behind them (a 500 for a duplicate GPU, a 422 without its field
for a NUL)."""

from __future__ import annotations

import re

import jsonschema
import orjson
import pytest
from django.test import Client

from greenops.alerts.api import RULE_SCHEMA
from greenops.alerts.models import Rule
from greenops.api.v1 import api
from greenops.teams.models import ApiToken
from greenops.telemetry.models import Gpu
from tests.support.factories import make_host

BUDGET = {"name": "Spend", "kind": "budget", "kpi": "cost_usd", "fire_level": 500}


@pytest.fixture
def owner(users):
    c = Client()
    c.force_login(users["owner"])
    return c


@pytest.mark.parametrize(("change", "field"), [
    ({"name": "Sp\u0000end"}, "name"),
    ({"host": "gpu-\u00001"}, "host"),
    ({"channels": ["oncall", "pager\u0000"]}, "channels[1]"),
    ({"kind": "thre\u0000shold"}, "kind"),
])
def test_a_nul_in_an_alert_rule_names_its_field(owner, team, change, field):
    """PostgreSQL text cannot hold NUL; before, the generic DataError answer said field null."""
    r = owner.post(f"/api/v1/teams/{team.slug}/alerts", orjson.dumps({**BUDGET, **change}),
                   content_type="application/json")
    assert r.status_code == 422, r.content
    assert r.json()["field"] == field
    assert "NUL" in r.json()["message"]
    assert not Rule.objects.exists()


def test_the_rule_schema_says_which_kind_needs_what():
    """The budget rule the alerts tests create is valid; what rules.clean refuses is not."""
    jsonschema.validate(BUDGET, RULE_SCHEMA)
    jsonschema.validate({"name": "Down", "kind": "stopped", "host": "gpu-1"}, RULE_SCHEMA)
    for bad in ({**BUDGET, "kpi": "gpu_util_pct"},       # a budget is for cost or carbon
                {**BUDGET, "fire_level": 0},              # above 0
                {**BUDGET, "name": "  "},                 # blank once stripped
                {**BUDGET, "name": "two\nlines"},
                {**BUDGET, "host": "a", "workload": "b"},  # one scope
                {**BUDGET, "mute_start_hour": 22},        # needs mute_end_hour
                {**BUDGET, "for_minutes": 1441},          # INT_LIMITS: 0..1440
                {"name": "Down", "kind": "stopped", "workload": "w"},
                {"name": "Jump", "kind": "change", "kpi": "power_w", "window": "month",
                 "fire_level": 10}):                      # change: rolling windows only
        with pytest.raises(jsonschema.ValidationError):
            jsonschema.validate(bad, RULE_SCHEMA)


def test_an_inventory_naming_one_gpu_twice_is_a_422_not_a_500(client, team):
    """Found by the positive run: two entries for index 0 broke the (host, index) key."""
    host, token = make_host(team)
    before = Gpu.objects.filter(host=host).count()
    r = client.post("/api/v1/inventory", orjson.dumps({"gpus": [{"index": 0}, {"index": 0}]}),
                    content_type="application/json", HTTP_AUTHORIZATION=f"Bearer {token}")
    assert r.status_code == 422, r.content
    assert r.json()["field"] == "gpus[1].index"
    assert Gpu.objects.filter(host=host).count() == before
    # 5.0 is the integer 5 for JSON Schema (the schema says integer): accepted as GPU 5.
    r = client.post("/api/v1/inventory", orjson.dumps({"gpus": [{"index": 5.0, "name": "H100"}]}),
                    content_type="application/json", HTTP_AUTHORIZATION=f"Bearer {token}")
    assert r.status_code == 200, r.content
    assert Gpu.objects.get(host=host, index=5).name == "H100"


def test_a_nul_in_a_query_parameter_names_the_parameter(client, team):
    token = ApiToken.issue(team, "app", scope=ApiToken.Scope.READ)[1]
    r = client.get("/api/v1/prices", {"region": "eu\u0000west", "instance_type": "p5"},
                   HTTP_AUTHORIZATION=f"Bearer {token}")
    assert r.status_code == 422, r.content
    assert r.json()["field"] == "region"


def test_query_parameters_declare_what_the_server_takes():
    paths = api.get_openapi_schema()["paths"]

    def param(path, name):
        return next(p["schema"] for p in paths[path]["get"]["parameters"] if p["name"] == name)

    assert param("/api/v1/teams/{slug}/usage", "range")["enum"] == \
        ["hour", "day", "week", "month", "quarter"]
    assert param("/api/v1/teams/{slug}/costs", "lookback")["anyOf"][0]["enum"] == \
        ["7", "30", "60"]
    month = param("/api/v1/teams/{slug}/kpis", "month")["pattern"]
    assert re.fullmatch(month, "2026-11") and re.fullmatch(month, "")
    assert not re.fullmatch(month, "0000-11") and not re.fullmatch(month, "2026-13")
    assert param("/api/v1/prices", "region")["pattern"] == "^[^\\u0000]*$"


def test_alert_rule_lists_given_as_something_else_name_their_field(client, users, team):
    """Found by the fuzz run on a fresh clone: `mute_weekdays: true` (and `channels: 5`) were
    iterated as lists, a 500. They are a 422 naming the field."""
    client.force_login(users["owner"])
    for field, value in (("mute_weekdays", True), ("channels", 5), ("mute_weekdays", [True])):
        r = client.post(f"/api/v1/teams/{team.slug}/alerts", orjson.dumps(
            {"name": "Idle", "kind": "stopped", "stopped_minutes": 10, field: value}),
            content_type="application/json")
        assert r.status_code == 422, (field, r.content)
        assert orjson.loads(r.content)["field"] == field
