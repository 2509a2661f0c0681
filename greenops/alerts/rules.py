"""Creating and changing rules from a form or the API: one validation, errors naming the field.

Input is a plain dict (form strings or JSON values). Scope is given by name, as people and
alerts-as-code files write it: `host` (host name), `gpu` ("host-name:index"), `workload` (slug).
"""

from __future__ import annotations

import copy
import datetime as dt

from django.db import transaction
from django.utils import timezone

from greenops.alerts import evaluate, kpi_values
from greenops.alerts.models import (
    Channel,
    Direction,
    NoDataPolicy,
    Rule,
    RuleKind,
)
from greenops.errors import invalid
from greenops.teams.models import Team
from greenops.telemetry.models import Gpu, Host
from greenops.workloads.models import Workload

ROLLING = ("1h", "6h", "24h", "7d")
INT_LIMITS = {  # field -> (min, max)
    "baseline_days": (1, 90), "min_requests": (0, 10**9), "forecast_min_days": (1, 27),
    "stopped_minutes": (1, 7 * 1440), "nodata_grace_minutes": (1, 7 * 1440),
    "for_minutes": (0, 1440),
    "keep_firing_minutes": (0, 1440), "repeat_minutes": (0, 7 * 1440),
}
DEFAULTS = {"window": "1h", "direction": Direction.ABOVE, "baseline_days": 7, "min_requests": 0,
            "budget_forecast": True, "forecast_min_days": 7, "stopped_minutes": 10,
            "nodata_grace_minutes": 60,
            "for_minutes": 5, "keep_firing_minutes": 0, "no_data": NoDataPolicy.NODATA,
            "include_simulated": False, "repeat_minutes": 240, "enabled": True}


def _str(data: dict, key: str) -> str:
    v = data.get(key)
    return "" if v is None else str(v).strip()


def _bool(data: dict, key: str) -> bool:
    v = data.get(key)
    if isinstance(v, bool):
        return v
    if v in (None, ""):
        return False
    if str(v).lower() in ("1", "true", "on", "yes"):
        return True
    if str(v).lower() in ("0", "false", "off", "no"):
        return False
    raise invalid(key, "must be true or false")


def _float(data: dict, key: str, required: bool = False) -> float | None:
    v = data.get(key)
    if v in (None, ""):
        if required:
            raise invalid(key, "is required for this kind of rule")
        return None
    try:
        out = float(v)
    except (TypeError, ValueError):
        raise invalid(key, "must be a number") from None
    if out != out or out in (float("inf"), float("-inf")):
        raise invalid(key, "must be a finite number")
    return out


def _int(data: dict, key: str) -> int:
    v = data.get(key)
    if v in (None, ""):
        return DEFAULTS[key]
    try:
        out = int(v)
    except (TypeError, ValueError):
        raise invalid(key, "must be a whole number") from None
    lo, hi = INT_LIMITS[key]
    if not lo <= out <= hi:
        raise invalid(key, f"must be between {lo} and {hi}")
    return out


def _choice(data: dict, key: str, choices, default=None) -> str:
    v = _str(data, key) or (default if default is not None else DEFAULTS.get(key, ""))
    if v not in choices:
        raise invalid(key, f"must be one of {', '.join(choices)}")
    return v


def _scope(team: Team, data: dict) -> dict:
    given = [k for k in ("host", "gpu", "workload") if _str(data, k)]
    if len(given) > 1:
        raise invalid(given[1], "a rule has one scope: give host, gpu or workload, not several")
    out = {"host": None, "gpu": None, "workload": None}
    if not given:
        return out
    key = given[0]
    value = _str(data, key)
    if key == "host":
        out["host"] = Host.objects.filter(team=team, name=value).first()
        if out["host"] is None:
            raise invalid("host", f"no host {value!r} in this team")
    elif key == "workload":
        out["workload"] = Workload.objects.filter(team=team, slug=value).first()
        if out["workload"] is None:
            raise invalid("workload", f"no workload {value!r} in this team")
    else:
        name, _, index = value.rpartition(":")
        out["gpu"] = Gpu.objects.filter(host__team=team, host__name=name,
                                        index=int(index) if index.isdigit() else -1).first()
        if out["gpu"] is None:
            raise invalid("gpu", f"no GPU {value!r} in this team (write host-name:index)")
    return out


def _channels(team: Team, data: dict) -> list[Channel]:
    raw = data.get("channels") or []
    if isinstance(raw, str):
        raw = [p for p in raw.split(",") if p.strip()]
    if not isinstance(raw, list):
        raise invalid("channels", "a list of channel ids or names")
    found = []
    for item in raw:
        item = str(item).strip()
        ch = Channel.objects.filter(team=team, id=int(item)).first() if item.isdigit() else None
        ch = ch or Channel.objects.filter(team=team, name=item).first()
        if ch is None:
            raise invalid("channels", f"no channel {item!r} in this team")
        found.append(ch)
    return found


def _weekdays(data: dict) -> str:
    raw = data.get("mute_weekdays") or []
    if isinstance(raw, str):
        raw = [p for p in raw.split(",") if p.strip()]
    if not isinstance(raw, list):  # e.g. true: a list is what the schema asks for
        raise invalid("mute_weekdays", "weekdays are numbers, 0 = Monday to 6 = Sunday")
    days = set()
    for d in raw:
        try:
            if isinstance(d, bool):
                raise TypeError("a weekday is not true or false")
            day = int(d)
        except (TypeError, ValueError):
            raise invalid("mute_weekdays", "weekdays are numbers, 0 = Monday to 6 = Sunday") \
                from None
        if not 0 <= day <= 6:
            raise invalid("mute_weekdays", "weekdays are numbers, 0 = Monday to 6 = Sunday")
        days.add(day)
    return ",".join(str(d) for d in sorted(days))


def _hour(data: dict, key: str) -> int | None:
    v = _float(data, key)
    if v is None:
        return None
    if v != int(v) or not 0 <= v <= 23:
        raise invalid(key, "must be an hour from 0 to 23")
    return int(v)


def clean(team: Team, data: dict) -> tuple[dict, list[Channel]]:
    """Validated field values for a Rule, and its channels. Raises FieldError(422, field)."""
    name = _str(data, "name")
    if not name:
        raise invalid("name", "give the rule a name")
    if len(name) > 120:
        raise invalid("name", "at most 120 characters")
    if any(c < " " for c in name):
        raise invalid("name", "one line, without tabs or line breaks")
    kind = _choice(data, "kind", list(RuleKind.values), default="")
    out: dict = {"name": name, "kind": kind, **_scope(team, data)}
    out["direction"] = _choice(data, "direction", list(Direction.values))
    out["no_data"] = _choice(data, "no_data", list(NoDataPolicy.values))
    for key in INT_LIMITS:
        out[key] = _int(data, key)
    out["include_simulated"] = _bool(data, "include_simulated")
    out["budget_forecast"] = _bool(data, "budget_forecast") if "budget_forecast" in data \
        else DEFAULTS["budget_forecast"]
    out["enabled"] = _bool(data, "enabled") if "enabled" in data else True
    out["mute_weekdays"] = _weekdays(data)
    out["mute_start_hour"], out["mute_end_hour"] = (_hour(data, "mute_start_hour"),
                                                    _hour(data, "mute_end_hour"))
    if (out["mute_start_hour"] is None) != (out["mute_end_hour"] is None):
        missing = "mute_end_hour" if out["mute_end_hour"] is None else "mute_start_hour"
        raise invalid(missing, "a daily mute window needs a start and an end hour")
    out["fire_level"] = out["clear_level"] = None
    out["kpi"], out["window"] = "", "1h"
    if kind == RuleKind.STOPPED:
        if out["workload"] is not None:
            raise invalid("workload", "a stopped-host rule watches a host or the whole team")
        return out, _channels(team, data)
    out["kpi"] = _choice(data, "kpi", list(kpi_values.KPIS), default="")
    kpi = kpi_values.KPIS[out["kpi"]]
    if kpi.per_inference and (out["host"] or out["gpu"]):
        raise invalid("kpi", f"{kpi.label} needs inference counts, which belong to a "
                      "workload or the team: scope the rule to one of those")
    if kind == RuleKind.BUDGET:
        if out["kpi"] not in kpi_values.BUDGET_KPIS:
            raise invalid("kpi", "a budget is for spend (cost_usd) or carbon (co2e_kg)")
        out["window"] = "month"
        out["fire_level"] = _float(data, "fire_level", required=True)
        if out["fire_level"] <= 0:
            raise invalid("fire_level", "the monthly budget must be above 0")
        return out, _channels(team, data)
    windows = ROLLING if kind == RuleKind.CHANGE else list(kpi_values.WINDOWS)
    out["window"] = _choice(data, "window", windows)
    fire = _float(data, "fire_level", required=True)
    clear = _float(data, "clear_level")
    if kind == RuleKind.CHANGE:
        if fire <= 0:
            raise invalid("fire_level", "the change that fires is a percentage above 0")
        if clear is not None and not 0 <= clear <= fire:
            raise invalid("clear_level", "the change that clears lies between 0 and the "
                          "change that fires")
    elif clear is not None:
        if out["direction"] == Direction.ABOVE and clear > fire:
            raise invalid("clear_level", "an 'above' rule clears at or below its fire level")
        if out["direction"] == Direction.BELOW and clear < fire:
            raise invalid("clear_level", "a 'below' rule clears at or above its fire level")
    out["fire_level"], out["clear_level"] = fire, clear
    return out, _channels(team, data)


def save(team: Team, data: dict, rule: Rule | None = None, user=None,
         now: dt.datetime | None = None) -> Rule:
    """Create or change a rule, then judge it at once against its definition. A change never
    silently drops state: what it ends is resolved at the receiver (evaluate.after_edit)."""
    fields, chans = clean(team, data)
    now = now or timezone.now()
    with transaction.atomic():
        before, before_channels = None, []
        if rule is None:
            rule = Rule(team=team, created_by=user)
        else:  # lock against the beat's evaluation, and read the state it wrote last
            rule = (Rule.objects.select_for_update(of=("self",))
                    .select_related("team", "host", "gpu__host", "workload").get(id=rule.id))
            before = copy.copy(rule)
            before_channels = list(rule.channels.values_list("id", flat=True))
        for k, v in fields.items():
            setattr(rule, k, v)
        rule.save()
        rule.channels.set(chans)
        if before is None:
            if rule.enabled:
                evaluate.run(rule, now)
        else:
            evaluate.after_edit(before, rule, before_channels, now)
    return rule


def as_dict(rule: Rule) -> dict:
    """A rule as the API shows it: the same keys `save` accepts, plus its state."""
    return {
        "id": rule.id, "name": rule.name, "enabled": rule.enabled, "kind": rule.kind,
        "kpi": rule.kpi or None, "window": rule.window,
        "host": rule.host.name if rule.host_id else None,
        "gpu": f"{rule.gpu.host.name}:{rule.gpu.index}" if rule.gpu_id else None,
        "workload": rule.workload.slug if rule.workload_id else None,
        "direction": rule.direction, "fire_level": rule.fire_level,
        "clear_level": rule.clear_level, "baseline_days": rule.baseline_days,
        "min_requests": rule.min_requests, "budget_forecast": rule.budget_forecast,
        "forecast_min_days": rule.forecast_min_days, "stopped_minutes": rule.stopped_minutes,
        "nodata_grace_minutes": rule.nodata_grace_minutes,
        "for_minutes": rule.for_minutes, "keep_firing_minutes": rule.keep_firing_minutes,
        "no_data": rule.no_data, "include_simulated": rule.include_simulated,
        "channels": [c.name for c in rule.channels.all()],
        "repeat_minutes": rule.repeat_minutes,
        "mute_weekdays": [int(d) for d in rule.mute_weekdays.split(",") if d],
        "mute_start_hour": rule.mute_start_hour, "mute_end_hour": rule.mute_end_hour,
        "silenced_until": rule.silenced_until.isoformat() if rule.silenced_until else None,
        "state": {"state": rule.state, "since": rule.state_since.isoformat(),
                  "value": rule.last_value, "detail": rule.last_detail,
                  "evaluated_at": rule.last_evaluated_at.isoformat()
                  if rule.last_evaluated_at else None, "error": rule.last_error or None},
    }
