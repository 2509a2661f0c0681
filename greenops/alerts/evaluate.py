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
from dataclasses import dataclass, field

from django.db import transaction
from django.db.models import Q
from django.utils import timezone

from greenops import forecast
from greenops.alerts import kpi_values, notify
from greenops.alerts.models import (
    FIRING_STATES,
    Channel,
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
from greenops.units import amount, plural

BREACH, HOLD, CLEAR, NODATA, ERROR = "breach", "hold", "clear", "nodata", "error"
# Nothing to judge yet, and nothing wrong: a calendar window in its first hour, or a window
# without a figure while the rule's hosts still report. The state and its age stay as they are.
KEEP = "keep"
# 80 % two-sided interval of a normal distribution: the forecast says "likely between".


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
    if condition == KEEP:
        return state, since
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
    return amount(v, unit)


# --- what each kind sees ------------------------------------------------------------------------

# Reasons a figure is unknown because nothing was measured in its window (kpi_values.figure):
# only these can mean the source stopped. Any other reason (no price for a host) is an unknown
# figure in a window with data, and is No data with that reason.
EMPTY = ("no measurements in the window", "no GPU-hours measured in the window",
         "no inferences counted in the window", "the window has not started yet")


def no_figure(rule: Rule, scope: kpi_values.Scope, now: dt.datetime, reason: str,
              fig: dict) -> Outcome:
    """A window without a figure. For an empty window, No data means the source stopped: no
    samples from the rule's hosts for its grace period. While a host still reports, the rule
    keeps its state (its window may simply not hold a finished hour of samples yet)."""
    if not any(reason.endswith(e) for e in EMPTY):
        return Outcome(NODATA, None, reason, fig)
    grace = rule.nodata_grace_minutes
    seen = kpi_values.hosts_last_seen(scope)
    live = [name for name, t in seen if t is not None and now - t <= dt.timedelta(minutes=grace)]
    if live:
        return Outcome(KEEP, None, f"{reason}; {', '.join(live[:3])}"
                       f"{' and others' if len(live) > 3 else ''} reported in the last {grace} "
                       "min, so this is not No data: the rule keeps its state", fig)
    if not seen:
        return Outcome(NODATA, None, f"{reason}; no host in the rule's scope", fig)
    names = ", ".join(name for name, _ in seen[:3]) + (" and others" if len(seen) > 3 else "")
    return Outcome(NODATA, None, f"{reason}; no samples from {names} for over {grace} min",
                   fig)


def _calendar_start(rule: Rule, now: dt.datetime, tz) -> Outcome | None:
    """A "today" or "this month" rule in the first hour of its period: nothing to judge and
    nothing missing. Keeps the state (no NO DATA at every local midnight)."""
    if rule.window not in ("day", "month"):
        return None
    part = kpi_values.calendar(rule.window, now, tz)
    if part.so_far is not None:
        return None
    began = part.start.astimezone(tz)
    return Outcome(KEEP, None, f"{kpi_values.WINDOWS[rule.window][0]}: the period began at "
                   f"{began:%Y-%m-%d %H:%M %Z} and its first whole hour has not ended; the "
                   "rule keeps its state", {"start": part.start.isoformat(),
                                            "end": part.end.isoformat(),
                                            "coverage": part.coverage()})


def _threshold(rule: Rule, scope: kpi_values.Scope, now: dt.datetime, tz) -> Outcome:
    early = _calendar_start(rule, now, tz)
    if early is not None:
        return early
    start, end = kpi_values.window_bounds(rule.window, now, tz)
    f = kpi_values.figure(scope, rule.kpi, start, end)
    fig = f.as_json()
    if rule.window in ("day", "month"):
        fig["coverage"] = kpi_values.calendar(rule.window, now, tz).coverage()
    if f.value is None:
        return no_figure(rule, scope, now, f.reason, fig)
    if kpi_values.KPIS[rule.kpi].per_inference and f.requests < rule.min_requests:
        return Outcome(NODATA, None, f"{plural(f.requests, 'inference')} in the window, under the "
                       f"rule's minimum of {rule.min_requests}", fig)
    cond = compare(f.value, rule.direction, rule.fire_level, rule.effective_clear_level())
    clear = rule.effective_clear_level()
    covered = f" ({fig['coverage']['text']} of the period)" if "coverage" in fig else ""
    detail = (f"{kpi_values.KPIS[rule.kpi].label} {_fmt(f.value, f.unit)} over "
              f"{kpi_values.over(rule.window)}{covered}; fires {rule.direction} "
              f"{_fmt(rule.fire_level, f.unit)}, clears at {_fmt(clear, f.unit)}")
    return Outcome(cond, f.value, detail, fig)


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
        return no_figure(rule, scope, now,
                         f"{which}: {(cur if cur.value is None else base).reason}", fig)
    # The volume floor applies to both windows: a quiet hour's ratio is noise, not a trend.
    low = min(cur.requests, base.requests)
    if rule.min_requests and low < rule.min_requests:
        return Outcome(NODATA, None, f"{plural(low, 'inference')} in a window, under the rule's "
                       f"minimum of {rule.min_requests}", fig)
    if base.value == 0:
        return Outcome(NODATA, None, "baseline is 0: a change in % is undefined", fig)
    pct = change_pct(cur.value, base.value)
    fire, clear = rule.fire_level, rule.effective_clear_level()
    cond = compare(pct, rule.direction, fire if rule.direction == Direction.ABOVE else -fire,
                   clear if rule.direction == Direction.ABOVE else -clear)
    unit = kpi_values.KPIS[rule.kpi].unit
    detail = (f"{kpi_values.KPIS[rule.kpi].label} {_fmt(cur.value, unit)} against "
              f"{_fmt(base.value, unit)} {plural(rule.baseline_days, 'day')} earlier: "
              f"{pct:+.1f} %; "
              f"fires at {'+' if rule.direction == Direction.ABOVE else '-'}{fire:g} %")
    return Outcome(cond, pct, detail, fig)


def forecast_month(daily_values: list[float], days_in_month: int) -> forecast.MonthForecast:
    """The budget rule's month forecast: greenops.forecast's, whose 80 % prediction interval
    includes the uncertainty of the daily mean (it covers 75-85 % of simulated months)."""
    return forecast.month_total(daily_values, days_in_month)


def days_in_month(now: dt.datetime, tz) -> int:
    local = now.astimezone(tz)
    nxt = (local.replace(day=28) + dt.timedelta(days=4)).replace(day=1)
    return (nxt - local.replace(day=1)).days


def _budget(rule: Rule, scope: kpi_values.Scope, now: dt.datetime, tz) -> Outcome:
    start, end = kpi_values.window_bounds("month", now, tz)
    unit = kpi_values.KPIS[rule.kpi].unit
    if end <= start:  # the month's first hour: nothing spent in a whole hour yet
        actual = kpi_values.Figure(rule.kpi, 0.0, start, end)
    else:
        actual = kpi_values.figure(scope, rule.kpi, start, end)
    fig = actual.as_json()
    fig["coverage"] = kpi_values.calendar("month", now, tz).coverage()
    if actual.value is None and actual.reason != "no measurements in the window":
        return no_figure(rule, scope, now, actual.reason, fig)
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
            interval = (f"80 % interval {_fmt(fc.low, unit)} to {_fmt(fc.high, unit)}"
                        if fc.low is not None else "no interval from one day")
            parts.append(f"forecast {_fmt(fc.value, unit)} ({interval}, "
                         f"from {plural(fc.days, 'day')})")
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
        # A savepoint: a database error (a cancelled query, a statement timeout) rolls back to
        # here and leaves the evaluation's transaction usable, so the Error state is written.
        with transaction.atomic():
            out = KINDS[rule.kind](rule, kpi_values.Scope.of(rule), now, tz)
    except Exception as exc:  # shown on the rule's page; the other rules carry on
        return Outcome(ERROR, None, f"{type(exc).__name__}: {str(exc).strip()}"[:1000])
    if out.figure.get("simulated") and not rule.include_simulated and out.condition != NODATA:
        return Outcome(NODATA, None, "the figure includes simulated data and this rule "
                       "ignores simulated data", out.figure)
    return out


# --- one evaluation ----------------------------------------------------------------------------

def claim(rule_id: int, tick: dt.datetime) -> bool:
    """True for exactly one caller per rule and minute (two workers, a replayed message)."""
    return Rule.objects.filter(Q(last_tick__isnull=True) | Q(last_tick__lt=tick),
                               id=rule_id, enabled=True).update(last_tick=tick) == 1


def run(rule: Rule, now: dt.datetime | None = None, edited: bool = False) -> RuleEvent | None:
    """Evaluate once and write the result. Returns the history row, if the state changed.
    `edited`: right after someone saved the rule -- a firing rule whose new definition no
    longer holds resolves at once (no keep-firing wait: the change is deliberate)."""
    now = now or timezone.now()
    out = observe(rule, now)
    old, since = rule.state, rule.state_since
    if out.condition == NODATA and rule.no_data == NoDataPolicy.OK:
        out.condition = CLEAR
    if out.condition == NODATA and rule.no_data == NoDataPolicy.KEEP:
        new, new_since = old, since
    else:
        new, new_since = next_state(old, since, out.condition, now, rule.for_minutes * 60,
                                    0 if edited else rule.keep_firing_minutes * 60)
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
    # A mute (silence or mute window) that begins while a notified alert is firing closes it
    # at the receiver -- an incident must not stay open for a rule that will say nothing more.
    # If it still holds when the mute ends, a new FIRING opens it again.
    mute_closes = bool(muted) and rule.episode_notified and old in FIRING_STATES and \
        new in FIRING_STATES
    error_changed = out.condition == ERROR and out.detail != rule.last_error
    with transaction.atomic():
        event = None
        if new != old or error_changed or mute_closes:
            event = RuleEvent.objects.create(
                rule=rule, at=now, from_state=old, to_state=new, value=out.value,
                detail=out.detail, figure=out.figure, muted=muted if kind else "")
        RuleValue.objects.create(rule=rule, at=now, value=out.value)
        rule.state, rule.state_since = new, new_since
        if out.condition != KEEP:
            rule.last_value = out.value
        rule.last_detail, rule.last_evaluated_at = out.detail, now
        rule.last_error = out.detail if out.condition == ERROR else ""
        fields = ["state", "state_since", "last_value", "last_detail", "last_evaluated_at",
                  "last_error"]
        if new == State.OK:
            rule.episode_notified = False
            fields.append("episode_notified")
        if mute_closes:
            closing = Outcome(out.condition, out.value, f"{muted}: notifications are paused, so "
                              "this alert is closed here; if it still holds when the mute ends, "
                              "a new FIRING is sent. " + out.detail, out.figure)
            enqueue(rule, NotificationKind.RESOLVED, event, closing, now, closed_by="muted")
            rule.episode_notified = False
            fields.append("episode_notified")
        elif kind and not muted:
            queued = enqueue(rule, kind, event, out, now)
            if queued and kind != NotificationKind.RESOLVED:
                rule.episode_notified = True
                rule.last_notified_at = now
                fields += ["episode_notified", "last_notified_at"]
        rule.save(update_fields=list(dict.fromkeys(fields)))
    return event


def enqueue(rule: Rule, kind: str, event: RuleEvent | None, out: Outcome,
            now: dt.datetime, closed_by: str = "", channel_ids: list[int] | None = None) -> int:
    """Write one pending Notification per chosen channel; delivery picks them up (grouped by
    channel). The dedupe key makes a second writer of the same event a no-op. `closed_by`:
    a "resolved" that a person caused (edited, disabled, deleted, muted), not the figure."""
    payload = notify.payload(rule, kind, out.value, out.detail, out.figure, now)
    if closed_by:
        payload["closed_by"] = closed_by
    chans = rule.channels.all() if channel_ids is None else Channel.objects.filter(
        id__in=channel_ids)
    n = 0
    for ch in chans.filter(disabled_at__isnull=True):
        if kind == NotificationKind.RESOLVED and not ch.send_resolved:
            continue
        key = f"ev{event.id}:ch{ch.id}" if event else \
            f"r{rule.id}:{kind}:{now:%Y%m%dT%H%M}:ch{ch.id}"
        _, created = Notification.objects.get_or_create(
            dedupe_key=key, defaults={"channel": ch, "rule": rule, "event": event,
                                      "kind": kind, "payload": payload})
        n += created
    return n


# --- changes people make -------------------------------------------------------------------------

# What makes a rule a different alert: the receiver's incident is about this KPI, this scope,
# this direction. Levels, windows and timings are the same alert, judged again.
IDENTITY = ("kind", "kpi", "host_id", "gpu_id", "workload_id", "direction")


def close(rule: Rule, now: dt.datetime, why: str, closed_by: str,
          channel_ids: list[int] | None = None) -> bool:
    """Send "resolved" for a notified firing episode that ends because of what someone did,
    not because the figure cleared. Returns whether one was owed."""
    if rule.state not in FIRING_STATES or not rule.episode_notified:
        return False
    event = RuleEvent.objects.create(rule_id=rule.id, at=now, from_state=rule.state,
                                     to_state=State.OK, value=rule.last_value, detail=why)
    enqueue(rule, NotificationKind.RESOLVED, event,
            Outcome(CLEAR, rule.last_value, why), now, closed_by, channel_ids)
    return True


def _reset(rule: Rule, now: dt.datetime) -> None:
    rule.state, rule.state_since, rule.episode_notified = State.OK, now, False
    rule.save(update_fields=["state", "state_since", "episode_notified"])


def after_edit(before: Rule, rule: Rule, before_channels: list[int],
               now: dt.datetime) -> None:
    """Called (inside the save's transaction, with the row locked) after a rule was changed:
    close what the change ends, then judge the new definition at once."""
    if not rule.enabled:
        close(before, now, "the rule was disabled: this alert is closed", "disabled",
              before_channels)
        _reset(rule, now)
        return
    if any(getattr(before, k) != getattr(rule, k) for k in IDENTITY):
        close(before, now, f"the rule was changed to watch something else (now: "
              f"{rule.kpi or 'hosts reporting'} {rule.direction} for {rule.scope_label}): this "
              "alert is closed, and a new one opens if the new condition holds", "changed",
              before_channels)
        _reset(rule, now)
    else:
        removed = sorted(set(before_channels) - set(rule.channels.values_list("id", flat=True)))
        if removed:
            close(before, now, "this channel was removed from the rule: the alert is closed "
                  "here", "changed", removed)
    run(rule, now, edited=True)


def reassess(rule_id: int, now: dt.datetime | None = None) -> Rule:
    """Evaluate now, with the row locked against the beat's evaluation (a silence set or
    lifted: the receiver hears at once, not at the next minute)."""
    now = now or timezone.now()
    with transaction.atomic():
        rule = (Rule.objects.select_for_update(of=("self",))
                .select_related("team", "host", "gpu__host", "workload").get(id=rule_id))
        if rule.enabled:
            run(rule, now)
    return rule


def delete(rule_id: int, now: dt.datetime | None = None) -> None:
    """Delete a rule; a notified firing alert is resolved first (its notification outlives
    the rule: Notification.rule is SET_NULL)."""
    now = now or timezone.now()
    with transaction.atomic():
        rule = (Rule.objects.select_for_update(of=("self",))
                .select_related("team", "host", "gpu__host", "workload").get(id=rule_id))
        close(rule, now, "the rule was deleted: this alert is closed", "deleted")
        rule.delete()


def give_back(rule_id: int, tick: dt.datetime, previous: dt.datetime | None,
              exc: BaseException) -> None:
    """An evaluation whose write failed: release its minute (the next message retries it)
    and write the error where the rule's page shows it, instead of losing both."""
    Rule.objects.filter(id=rule_id, last_tick=tick).update(
        last_tick=previous, last_error=f"{type(exc).__name__}: {str(exc).strip()}"[:1000])
