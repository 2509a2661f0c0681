"""Rule evaluation: what each kind of rule sees, the state machine, and the one run() that
writes a rule's new state, its history and the notifications it owes.

States follow Grafana's: OK -> Pending (for `for_minutes`) -> Firing -> Recovering (for
`keep_firing_minutes`) -> OK, plus No data and Error. Threshold rules have a separate clear
level (hysteresis): a value hovering at the line holds the current state instead of flapping.

Late telemetry: every evaluation recomputes its window from the rollups, so a figure corrected
by late samples is simply what the next evaluation sees. A rule already firing stays firing
(no second "firing" message: the state, not the value, decides what is sent) and, if the
corrected figure clears it, sends one "resolved" through the usual Recovering -> OK path.
"""

from __future__ import annotations

import datetime as dt
import math
import statistics
from dataclasses import dataclass, field

from django.db import transaction
from django.db.models import Q
from django.utils import timezone

from greenops.alerts import kpi_values, notify
from greenops.alerts.models import (
    Direction,
    NoDataPolicy,
    Notification,
    NotificationKind,
    Rule,
    RuleEvent,
    RuleKind,
    RuleValue,
    State,
)

BREACH, HOLD, CLEAR, NODATA, ERROR = "breach", "hold", "clear", "nodata", "error"
# 80 % two-sided interval of a normal distribution: the forecast says "likely between".
FORECAST_Z = 1.2816


@dataclass
class Outcome:
    """What one evaluation saw: a condition, the value, and words for people."""

    condition: str
    value: float | None
    detail: str
    figure: dict = field(default_factory=dict)


# --- the state machine (pure) ------------------------------------------------------------------

def next_state(state: str, since: dt.datetime, condition: str, now: dt.datetime,
               for_s: float, keep_s: float) -> tuple[str, dt.datetime]:
    """(new state, its since) for one evaluation's condition."""
    if condition == NODATA:
        return (state, since) if state == State.NODATA else (State.NODATA, now)
    if condition == ERROR:
        return (state, since) if state == State.ERROR else (State.ERROR, now)
    if state in (State.OK, State.NODATA, State.ERROR):
        if condition == BREACH:
            return (State.PENDING, now) if for_s > 0 else (State.FIRING, now)
        return (State.OK, now if state != State.OK else since)
    if state == State.PENDING:
        if condition != BREACH:
            return State.OK, now
        if (now - since).total_seconds() >= for_s:
            return State.FIRING, now
        return state, since
    if state == State.FIRING:
        if condition != CLEAR:
            return state, since
        return (State.RECOVERING, now) if keep_s > 0 else (State.OK, now)
    # Recovering: back to firing on any non-clear value, OK once clear for keep_s.
    if condition != CLEAR:
        return State.FIRING, now
    if (now - since).total_seconds() >= keep_s:
        return State.OK, now
    return state, since


def notification_for(old: str, new: str, episode_notified: bool) -> str | None:
    """The notification a transition owes (before mute and channel preferences)."""
    if new == old:
        return None
    if new == State.FIRING and old != State.RECOVERING:
        return NotificationKind.FIRING
    if new == State.OK and old in (State.FIRING, State.RECOVERING) and episode_notified:
        return NotificationKind.RESOLVED
    if new == State.NODATA:
        return NotificationKind.NODATA
    if new == State.ERROR:
        return NotificationKind.ERROR
    if new == State.OK and old in (State.NODATA, State.ERROR) and episode_notified:
        return NotificationKind.RESOLVED
    return None


def compare(value: float, direction: str, fire: float, clear: float) -> str:
    """Threshold with hysteresis: above fires past `fire`, clears only under `clear`."""
    if direction == Direction.ABOVE:
        return BREACH if value > fire else CLEAR if value < clear else HOLD
    return BREACH if value < fire else CLEAR if value > clear else HOLD


def _fmt(v: float | None, unit: str = "") -> str:
    if v is None:
        return "unknown"
    text = f"{v:,.4g}" if abs(v) < 1e6 else f"{v:,.0f}"
    return f"{text} {unit}".strip()


# --- what each kind sees ------------------------------------------------------------------------

def _threshold(rule: Rule, scope: kpi_values.Scope, now: dt.datetime, tz) -> Outcome:
    start, end = kpi_values.window_bounds(rule.window, now, tz)
    f = kpi_values.figure(scope, rule.kpi, start, end)
    if f.value is None:
        return Outcome(NODATA, None, f.reason, f.as_json())
    if kpi_values.KPIS[rule.kpi].per_inference and f.requests < rule.min_requests:
        return Outcome(NODATA, None, f"{f.requests} inferences in the window, under the "
                       f"rule's minimum of {rule.min_requests}", f.as_json())
    cond = compare(f.value, rule.direction, rule.fire_level, rule.effective_clear_level())
    clear = rule.effective_clear_level()
    detail = (f"{kpi_values.KPIS[rule.kpi].label} {_fmt(f.value, f.unit)} over the "
              f"{kpi_values.WINDOWS[rule.window][0]}; fires {rule.direction} "
              f"{_fmt(rule.fire_level, f.unit)}, clears at {_fmt(clear, f.unit)}")
    return Outcome(cond, f.value, detail, f.as_json())


def change_pct(current: float, baseline: float) -> float:
    return (current - baseline) / baseline * 100


def _change(rule: Rule, scope: kpi_values.Scope, now: dt.datetime, tz) -> Outcome:
    start, end = kpi_values.window_bounds(rule.window, now, tz)
    shift = dt.timedelta(days=rule.baseline_days)
    cur = kpi_values.figure(scope, rule.kpi, start, end)
    base = kpi_values.figure(scope, rule.kpi, start - shift, end - shift)
    fig = {**cur.as_json(), "baseline": base.as_json()}
    if cur.value is None or base.value is None:
        which = "current window" if cur.value is None else "baseline window"
        return Outcome(NODATA, None, f"{which}: {(cur if cur.value is None else base).reason}",
                       fig)
    # The volume floor applies to both windows: a quiet hour's ratio is noise, not a trend.
    low = min(cur.requests, base.requests)
    if rule.min_requests and low < rule.min_requests:
        return Outcome(NODATA, None, f"{low} inferences in a window, under the rule's "
                       f"minimum of {rule.min_requests}", fig)
    if base.value == 0:
        return Outcome(NODATA, None, "baseline is 0: a change in % is undefined", fig)
    pct = change_pct(cur.value, base.value)
    fire, clear = rule.fire_level, rule.effective_clear_level()
    cond = compare(pct, rule.direction, fire if rule.direction == Direction.ABOVE else -fire,
                   clear if rule.direction == Direction.ABOVE else -clear)
    unit = kpi_values.KPIS[rule.kpi].unit
    detail = (f"{kpi_values.KPIS[rule.kpi].label} {_fmt(cur.value, unit)} against "
              f"{_fmt(base.value, unit)} {rule.baseline_days} days earlier: {pct:+.1f} %; "
              f"fires at {'+' if rule.direction == Direction.ABOVE else '-'}{fire:g} %")
    return Outcome(cond, pct, detail, fig)


@dataclass
class Forecast:
    value: float
    low: float
    high: float
    days: int  # complete days it is based on


def forecast_month(daily_values: list[float], days_in_month: int) -> Forecast:
    """Month total = complete days so far + their daily mean for each remaining day, with an
    80 % interval assuming independent days: remaining x mean +- z x sd x sqrt(remaining)."""
    n = len(daily_values)
    so_far = sum(daily_values)
    mean = so_far / n
    remaining = days_in_month - n
    sd = statistics.stdev(daily_values) if n > 1 else 0.0
    spread = FORECAST_Z * sd * math.sqrt(remaining)
    point = so_far + mean * remaining
    return Forecast(point, max(so_far, point - spread), point + spread, n)


def days_in_month(now: dt.datetime, tz) -> int:
    local = now.astimezone(tz)
    nxt = (local.replace(day=28) + dt.timedelta(days=4)).replace(day=1)
    return (nxt - local.replace(day=1)).days


def _budget(rule: Rule, scope: kpi_values.Scope, now: dt.datetime, tz) -> Outcome:
    start, end = kpi_values.window_bounds("month", now, tz)
    unit = kpi_values.KPIS[rule.kpi].unit
    actual = kpi_values.figure(scope, rule.kpi, start, end)
    fig = actual.as_json()
    if actual.value is None and actual.reason != "no measurements in the window":
        return Outcome(NODATA, None, actual.reason, fig)
    spent = actual.value or 0.0  # nothing measured this month yet is a real 0 spent
    budget = rule.fire_level
    parts = [f"{kpi_values.KPIS[rule.kpi].label} this month {_fmt(spent, unit)} of a "
             f"{_fmt(budget, unit)} budget ({spent / budget * 100:.0f} %)"]
    breach = spent >= budget
    if rule.budget_forecast:
        days = [f.value for f in kpi_values.daily(scope, rule.kpi, now, tz)]
        if any(v is None for v in days):
            parts.append("no forecast: a day of the month has no figure")
        elif len(days) < rule.forecast_min_days:
            parts.append(f"no forecast yet: {len(days)} complete days, it needs "
                         f"{rule.forecast_min_days}")
        else:
            fc = forecast_month(days, days_in_month(now, tz))
            fig["forecast"] = {"value": fc.value, "low": fc.low, "high": fc.high,
                               "days": fc.days, "interval": "80 %"}
            parts.append(f"forecast {_fmt(fc.value, unit)} (80 % interval "
                         f"{_fmt(fc.low, unit)} to {_fmt(fc.high, unit)}, from {fc.days} days)")
            breach = breach or fc.value >= budget
    return Outcome(BREACH if breach else CLEAR, spent, "; ".join(parts), fig)


def _stopped(rule: Rule, scope: kpi_values.Scope, now: dt.datetime, tz) -> Outcome:
    limit = dt.timedelta(minutes=rule.stopped_minutes)
    seen = kpi_values.hosts_last_seen(scope)
    if not seen:
        return Outcome(NODATA, None, "the team has no hosts")
    never = [name for name, t in seen if t is None]
    silent = sorted((name, now - t) for name, t in seen if t is not None and now - t > limit)
    if len(never) == len(seen):
        return Outcome(NODATA, None, "no host has reported yet")
    words = ", ".join(f"{n} ({int(d.total_seconds() // 60)} min)" for n, d in silent)
    if silent:
        return Outcome(BREACH, float(len(silent)), f"no samples for over "
                       f"{rule.stopped_minutes} min from {words}",
                       {"hosts": [n for n, _ in silent]})
    return Outcome(CLEAR, 0.0, f"every host reported in the last {rule.stopped_minutes} min")


KINDS = {RuleKind.THRESHOLD: _threshold, RuleKind.CHANGE: _change, RuleKind.BUDGET: _budget,
         RuleKind.STOPPED: _stopped}


def observe(rule: Rule, now: dt.datetime) -> Outcome:
    """What the rule sees now, errors included: one broken rule must not stop the others."""
    tz = kpi_values.team_tz(rule.team)
    try:
        out = KINDS[rule.kind](rule, kpi_values.Scope.of(rule), now, tz)
    except Exception as exc:  # shown on the rule's page; the other rules carry on
        return Outcome(ERROR, None, f"{type(exc).__name__}: {exc}")
    if out.figure.get("simulated") and not rule.include_simulated and out.condition != NODATA:
        return Outcome(NODATA, None, "the figure includes simulated data and this rule "
                       "ignores simulated data", out.figure)
    return out


# --- one evaluation ----------------------------------------------------------------------------

def claim(rule_id: int, tick: dt.datetime) -> bool:
    """True for exactly one caller per rule and minute (two workers, a replayed message)."""
    return Rule.objects.filter(Q(last_tick__isnull=True) | Q(last_tick__lt=tick),
                               id=rule_id, enabled=True).update(last_tick=tick) == 1


def run(rule: Rule, now: dt.datetime | None = None) -> RuleEvent | None:
    """Evaluate once and write the result. Returns the history row, if the state changed."""
    now = now or timezone.now()
    out = observe(rule, now)
    old, since = rule.state, rule.state_since
    if out.condition == NODATA and rule.no_data == NoDataPolicy.OK:
        out.condition = CLEAR
    if out.condition == NODATA and rule.no_data == NoDataPolicy.KEEP:
        new, new_since = old, since
    else:
        new, new_since = next_state(old, since, out.condition, now, rule.for_minutes * 60,
                                    rule.keep_firing_minutes * 60)
    tz = kpi_values.team_tz(rule.team)
    muted = rule.muted_reason(now, tz)
    kind = notification_for(old, new, rule.episode_notified)
    if new == State.FIRING and old == State.FIRING and not muted:
        # Still firing: the first message of the episode if a silence held it back, then
        # one per repeat interval.
        if not rule.episode_notified:
            kind = NotificationKind.FIRING
        elif rule.repeat_minutes and rule.last_notified_at and \
                now - rule.last_notified_at >= dt.timedelta(minutes=rule.repeat_minutes):
            kind = NotificationKind.REPEAT
    error_changed = out.condition == ERROR and out.detail != rule.last_error
    with transaction.atomic():
        event = None
        if new != old or error_changed:
            event = RuleEvent.objects.create(
                rule=rule, at=now, from_state=old, to_state=new, value=out.value,
                detail=out.detail, figure=out.figure, muted=muted if kind else "")
        RuleValue.objects.create(rule=rule, at=now, value=out.value)
        rule.state, rule.state_since = new, new_since
        rule.last_value, rule.last_detail, rule.last_evaluated_at = out.value, out.detail, now
        rule.last_error = out.detail if out.condition == ERROR else ""
        fields = ["state", "state_since", "last_value", "last_detail", "last_evaluated_at",
                  "last_error"]
        if new == State.OK:
            rule.episode_notified = False
            fields.append("episode_notified")
        if kind and not muted:
            queued = enqueue(rule, kind, event, out, now)
            if queued and kind != NotificationKind.RESOLVED:
                rule.episode_notified = True
                rule.last_notified_at = now
                fields += ["episode_notified", "last_notified_at"]
        rule.save(update_fields=list(dict.fromkeys(fields)))
    return event


def enqueue(rule: Rule, kind: str, event: RuleEvent | None, out: Outcome,
            now: dt.datetime) -> int:
    """Write one pending Notification per chosen channel; delivery picks them up (grouped by
    channel). The dedupe key makes a second writer of the same event a no-op."""
    payload = notify.payload(rule, kind, out.value, out.detail, out.figure, now)
    n = 0
    for ch in rule.channels.filter(disabled_at__isnull=True):
        if kind == NotificationKind.RESOLVED and not ch.send_resolved:
            continue
        key = f"ev{event.id}:ch{ch.id}" if event else \
            f"r{rule.id}:{kind}:{now:%Y%m%dT%H%M}:ch{ch.id}"
        _, created = Notification.objects.get_or_create(
            dedupe_key=key, defaults={"channel": ch, "rule": rule, "event": event,
                                      "kind": kind, "payload": payload})
        n += created
    return n
