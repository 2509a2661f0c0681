"""JSON API of the alerts app (alerts as code), mounted on /api/v1/ by greenops/api/v1.py."""

from __future__ import annotations

from django.http import HttpRequest
from django.shortcuts import get_object_or_404
from ninja import Router
from ninja.responses import Status
from ninja.security import django_auth

from greenops import windows
from greenops.alerts import evaluate, kpi_values, rules
from greenops.alerts.models import Channel, NoDataPolicy, Rule, RuleKind
from greenops.errors import invalid
from greenops.request_body import json_body
from greenops.teams.permissions import authorize_api
from greenops.telemetry import wire

router = Router(tags=["alerts"])

RULE_KEYS = {"name", "enabled", "kind", "kpi", "window", "host", "gpu", "workload", "direction",
             "fire_level", "clear_level", *rules.INT_LIMITS, "budget_forecast", "no_data",
             "include_simulated", "channels", "mute_weekdays", "mute_start_hour",
             "mute_end_hour"}
_NO_NUL = "^[^\\u0000]*$"  # PostgreSQL text cannot hold NUL (_doc refuses it, naming the field)
_TEXT = {"type": "string", "pattern": _NO_NUL}
_COMMON = {
    # One line: no control character, not blank (rules.clean strips and checks).
    "name": {"type": "string", "maxLength": 120,
             "pattern": "^[^\\u0000-\\u001f]*[^\\s\\u0000-\\u001f][^\\u0000-\\u001f]*$"},
    "enabled": {"type": "boolean"},
    "host": {**_TEXT, "description": "scope: a host name"},
    "gpu": {**_TEXT, "description": "scope: host-name:index"},
    "direction": {"enum": ["above", "below"]},
    **{k: {"type": "integer", "minimum": lo, "maximum": hi}
       for k, (lo, hi) in rules.INT_LIMITS.items()},
    "budget_forecast": {"type": "boolean"},
    "no_data": {"enum": list(NoDataPolicy.values)},
    "include_simulated": {"type": "boolean"},
    "channels": {"type": "array", "items": _TEXT, "description": "channel names of the team"},
    "mute_weekdays": {"type": "array", "items": {"type": "integer", "minimum": 0,
                                                  "maximum": 6}},
    "mute_start_hour": {"type": "integer", "minimum": 0, "maximum": 23},
    "mute_end_hour": {"type": "integer", "minimum": 0, "maximum": 23},
}
_WORKLOAD = {**_TEXT, "description": "scope: a workload slug"}
_FIRE = {"type": "number", "description": "threshold: KPI units; change: %; budget: the "
         "month's budget in USD or kg CO2e"}
_CLEAR = {"type": ["number", "null"], "description": "hysteresis: where a firing rule clears "
          "(threshold: on the far side of fire_level; change: between 0 and fire_level)"}
_SCOPE = ("host", "gpu", "workload")


def _kind(kind: str, required: list[str], **properties) -> dict:
    """The body for one kind of rule: rules.clean's checks for that kind."""
    scope = [k for k in _SCOPE if k in _COMMON or k in properties]
    return {"type": "object", "required": ["name", "kind", *required],
            "additionalProperties": False,
            # A rule has one scope (host, gpu or workload), not several.
            "not": {"anyOf": [{"required": [a, b]} for i, a in enumerate(scope)
                              for b in scope[i + 1:]]},
            "dependentRequired": {"mute_start_hour": ["mute_end_hour"],
                                  "mute_end_hour": ["mute_start_hour"]},
            "properties": {**_COMMON, "kind": {"const": kind}, **properties}}


RULE_SCHEMA = {
    "description": "One of four kinds of rule. The names of hosts, GPUs, workloads and channels "
                   "must be the team's.",
    "oneOf": [
        _kind(RuleKind.THRESHOLD, ["kpi", "fire_level"], kpi={"enum": list(kpi_values.KPIS)},
              window={"enum": list(kpi_values.WINDOWS)}, workload=_WORKLOAD,
              fire_level=_FIRE, clear_level=_CLEAR),
        _kind(RuleKind.CHANGE, ["kpi", "fire_level"], kpi={"enum": list(kpi_values.KPIS)},
              window={"enum": list(rules.ROLLING)}, workload=_WORKLOAD,
              fire_level={**_FIRE, "exclusiveMinimum": 0}, clear_level=_CLEAR),
        _kind(RuleKind.BUDGET, ["kpi", "fire_level"],
              kpi={"enum": list(kpi_values.BUDGET_KPIS)}, window={"const": "month"},
              workload=_WORKLOAD, fire_level={**_FIRE, "exclusiveMinimum": 0}),
        _kind(RuleKind.STOPPED, []),  # watches a host, a GPU's host or the team
    ],
}
_BODY = {"requestBody": {"required": True, "content": {"application/json": {
    "schema": RULE_SCHEMA}}}}


def _doc(request: HttpRequest) -> dict:
    doc = json_body(request)
    if not isinstance(doc, dict):
        raise invalid("body", "must be a JSON object")
    unknown = set(doc) - RULE_KEYS
    if unknown:
        raise invalid(sorted(unknown)[0], "is not a known field")
    for key, value in doc.items():
        if where := wire.nul_at(value, key):
            raise invalid(where, "must not contain a NUL character (\\u0000)")
    return doc


def _rules(team):
    return Rule.objects.filter(team=team).for_page()


@router.get("/teams/{slug}/alerts", auth=django_auth, response={200: list[dict]},
            summary="Alert rules of a team, with their state")
def list_rules(request: HttpRequest, slug: str):
    team, _ = authorize_api(request.user, slug, "team.view")
    return Status(200, [rules.as_dict(r) for r in _rules(team)])


@router.post("/teams/{slug}/alerts", auth=django_auth, response={201: dict},
             summary="Create an alert rule", openapi_extra=_BODY)
def create_rule(request: HttpRequest, slug: str):
    team, _ = authorize_api(request.user, slug, "alerts.manage")
    rule = rules.save(team, _doc(request), None, request.user)
    return Status(201, rules.as_dict(rule))


@router.get("/teams/{slug}/alerts/{rule_id}", auth=django_auth, response={200: dict},
            summary="One alert rule, its state and its latest state changes")
def get_rule(request: HttpRequest, slug: str, rule_id: int):
    team, _ = authorize_api(request.user, slug, "team.view")
    rule = get_object_or_404(_rules(team), id=rule_id)
    history = [{"at": e.at.isoformat(), "from": e.from_state, "to": e.to_state,
                "value": e.value, "detail": e.detail, "muted": e.muted or None}
               for e in rule.events.all()[:50]]
    return Status(200, {**rules.as_dict(rule), "history": history})


@router.put("/teams/{slug}/alerts/{rule_id}", auth=django_auth, response={200: dict},
            summary="Replace an alert rule (fields left out take their defaults)",
            openapi_extra=_BODY)
def put_rule(request: HttpRequest, slug: str, rule_id: int):
    team, _ = authorize_api(request.user, slug, "alerts.manage")
    rule = get_object_or_404(_rules(team), id=rule_id)
    return Status(200, rules.as_dict(rules.save(team, _doc(request), rule)))


@router.delete("/teams/{slug}/alerts/{rule_id}", auth=django_auth, response={204: None},
               summary="Delete an alert rule")
def delete_rule(request: HttpRequest, slug: str, rule_id: int):
    team, _ = authorize_api(request.user, slug, "alerts.manage")
    evaluate.delete(get_object_or_404(Rule, team=team, id=rule_id).id)
    return Status(204, None)


@router.post("/teams/{slug}/alerts/{rule_id}/silence", auth=django_auth, response={200: dict},
             summary="Silence a rule until a time (null lifts the silence)",
             openapi_extra={"requestBody": {"required": True, "content": {"application/json": {
                 "schema": {"type": "object", "required": ["until"], "properties": {
                     "until": {"type": ["string", "null"], "format": "date-time"}}}}}}})
def silence_rule(request: HttpRequest, slug: str, rule_id: int):
    team, _ = authorize_api(request.user, slug, "alerts.manage")
    rule = get_object_or_404(_rules(team), id=rule_id)
    doc = json_body(request)
    if not isinstance(doc, dict) or "until" not in doc:
        raise invalid("until", "is required: an ISO 8601 time, or null to lift the silence")
    until = doc["until"]
    if until is not None:
        until = windows.parse_time(until, "until", tz=None)
    rule.silenced_until = until
    rule.save(update_fields=["silenced_until"])
    evaluate.reassess(rule.id)
    rule.refresh_from_db()
    return Status(200, rules.as_dict(rule))


@router.get("/teams/{slug}/alert-channels", auth=django_auth, response={200: list[dict]},
            summary="Notification channels of a team (targets masked)")
def list_channels(request: HttpRequest, slug: str):
    team, _ = authorize_api(request.user, slug, "team.view")
    return Status(200, [
        {"id": c.id, "name": c.name, "kind": c.kind, "target": c.target_masked,
         "send_resolved": c.send_resolved, "enabled": c.enabled,
         "disabled_reason": c.disabled_reason or None, "last_error": c.last_error or None,
         "last_delivery_at": c.last_delivery_at.isoformat() if c.last_delivery_at else None}
        for c in Channel.objects.filter(team=team)])
