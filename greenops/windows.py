"""Time windows: the one vocabulary pages, the API, alerts and reports use for "which time".

A Window carries its start and its end ([start, end), aware, UTC) and a label, so every figure
computed over it can say which period it covers and how much of it has passed or was measured.
Windows come from five places:

- a period figure's named range ("day", "week", ...): whole finished hours ending at the start of
  the current hour, `period()`. Every figure that covers a period (home cards, the KPI page and
  API, the advisor, recommendations, reports) takes this window, so the same label is the same
  [start, end) and the same number everywhere;
- a live chart's named range ending at the end of the current step (minute, hour or day:
  whatever the chart's rollup resolution is), `named()`: charts show the still filling bucket,
  figures never do;
- a lookback of whole finished hours (costs' 7/30/60 days), `lookback()`;
- a custom start/end typed by a user, validated with the field named, `custom()`;
- a calendar month in a team's time zone (reports), `calendar_month()` / `parse_month()`,
  cut at the start of the current hour while it is running (`so_far()`).

Every window prints itself (`Window.text`): "30 days to 4 Dec 2026 14:00 UTC",
"1–30 Nov 2026, Europe/Paris", "1 Dec 2026 – 4 Dec 14:00, Europe/Paris (so far)".

Which rollup resolution serves a named range is decided by the app that owns the rollups
(telemetry.queries, kpis.queries); this module owns only time.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Iterable
from dataclasses import dataclass
from functools import cache
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError, available_timezones

from django.http import Http404, HttpRequest
from django.utils import timezone

from greenops.errors import invalid

MINUTE = dt.timedelta(minutes=1)
HOUR = dt.timedelta(hours=1)
DAY = dt.timedelta(days=1)
_EPOCH = dt.datetime(1970, 1, 1, tzinfo=dt.UTC)


def floor(t: dt.datetime, step: dt.timedelta) -> dt.datetime:
    """`t` rounded down to a multiple of `step` since the Unix epoch, in UTC."""
    t = t.astimezone(dt.UTC)
    return t - (t - _EPOCH) % step


def floor_hour(t: dt.datetime) -> dt.datetime:
    return floor(t, HOUR)


def floor_day(t: dt.datetime) -> dt.datetime:
    """The start of `t`'s UTC day (rollup days are UTC days)."""
    return floor(t, DAY)


def local_days(start: dt.datetime, end: dt.datetime,
               tz: dt.tzinfo) -> list[tuple[dt.datetime, dt.datetime]]:
    """The whole local calendar days in `tz` from the midnight that begins `start`'s day up to
    the midnight that begins `end`'s, as [start, end) pairs in UTC. A daylight-saving day is
    23 or 25 hours long: each day ends at the next local midnight, not 24 h later."""
    day = start.astimezone(tz).replace(hour=0, minute=0, second=0, microsecond=0)
    stop = end.astimezone(tz).replace(hour=0, minute=0, second=0, microsecond=0)
    out = []
    while day < stop:
        # Wall-clock arithmetic: 02:00 the next day is always on the next date, DST or not.
        nxt = (day + dt.timedelta(days=1, hours=2)).replace(hour=0)
        out.append((day.astimezone(dt.UTC), nxt.astimezone(dt.UTC)))
        day = nxt
    return out


def ceil(t: dt.datetime, step: dt.timedelta) -> dt.datetime:
    f = floor(t, step)
    return f if f == t else f + step


def _human_span(seconds: float) -> str:
    """60 -> "1 min", 86400 -> "24 h", 7 days -> "7 d": short enough for a KPI card."""
    if seconds < 60:
        return f"{seconds:.0f} s"
    if seconds < 3600:
        return f"{seconds / 60:.0f} min"
    if seconds <= 2 * 86400:
        hours = seconds / 3600
        return f"{hours:.0f} h" if hours >= 10 or hours == int(hours) else f"{hours:.1f} h"
    return f"{seconds / 86400:.0f} d"


@dataclass(frozen=True)
class Window:
    """[start, end), both aware and in UTC. `key` names where it came from: a named range's key,
    "lookback-30d", "custom" or "month-2026-11"."""

    start: dt.datetime
    end: dt.datetime
    label: str = ""
    key: str = "custom"
    tz: str = "UTC"  # the zone the window is printed in (a team's, for calendar months)
    so_far: bool = False  # a running calendar month cut at the start of the current hour

    def __post_init__(self) -> None:
        if self.start.tzinfo is None or self.end.tzinfo is None:
            raise ValueError("a Window needs aware datetimes")
        if self.end <= self.start:
            raise ValueError("a Window must end after it starts")
        object.__setattr__(self, "start", self.start.astimezone(dt.UTC))
        object.__setattr__(self, "end", self.end.astimezone(dt.UTC))

    @property
    def span(self) -> dt.timedelta:
        return self.end - self.start

    @property
    def span_s(self) -> float:
        return self.span.total_seconds()

    def elapsed_s(self, now: dt.datetime | None = None) -> float:
        """Seconds of the window that have already happened (0 for a future window)."""
        now = now or timezone.now()
        return max((min(self.end, now) - self.start).total_seconds(), 0.0)

    def previous(self) -> Window:
        """The window of equal length just before this one (for "change against")."""
        return Window(self.start - self.span, self.start, f"previous {self.label}".strip(),
                      f"{self.key}-previous")

    def widened(self, step: dt.timedelta) -> Window:
        """The smallest window of whole `step` buckets holding this one (rollups are bucketed)."""
        return Window(floor(self.start, step), ceil(self.end, step), self.label, self.key)

    def buckets(self, step: dt.timedelta) -> list[dt.datetime]:
        """Starts of the `step` buckets that overlap the window."""
        out, t = [], floor(self.start, step)
        while t < self.end:
            out.append(t)
            t += step
        return out

    def bucket_count(self, step: dt.timedelta) -> int:
        """len(self.buckets(step)), by arithmetic: the `step` buckets that overlap the window."""
        return -(-(self.end - floor(self.start, step)) // step)  # ceiling division

    def coverage(self, measured_s: float | None) -> dict:
        return coverage(measured_s, self.span_s)

    @property
    def text(self) -> str:
        """The window as every surface prints it (cards, pages, API, CSV, PDF)."""
        return describe(self)

    def as_dict(self) -> dict:
        return {"key": self.key, "label": self.label, "start": self.start.isoformat(),
                "end": self.end.isoformat(), "span_s": self.span_s, "text": self.text,
                "time_zone": self.tz, "so_far": self.so_far}


def _day_month(t: dt.datetime) -> str:
    return f"{t.day} {t:%b %Y}"


def span_words(span: dt.timedelta) -> str:
    """30 days -> "30 days", 24 h -> "24 hours", 1 h -> "1 hour"."""
    s = span.total_seconds()
    if s >= 2 * 86400 and s % 86400 == 0:
        n, unit = int(s // 86400), "day"
    elif s % 3600 == 0:
        n, unit = int(s // 3600), "hour"
    else:
        n, unit = int(s // 60), "minute"
    return f"{n} {unit}{'' if n == 1 else 's'}"


def describe(w: Window) -> str:
    """"1–30 Nov 2026, Europe/Paris" for a calendar month (its local days), "1 Dec 2026 –
    4 Dec 14:00, Europe/Paris (so far)" for a running one, "30 days to 4 Dec 2026 14:00 UTC"
    for a named range, "2026-11-01 00:00 to 2026-11-05 00:00 UTC" otherwise."""
    zone = ZoneInfo(w.tz) if w.tz in time_zone_names() else dt.UTC
    lo, hi = w.start.astimezone(zone), w.end.astimezone(zone)
    if w.key.startswith("month-") and len(w.key) == len("month-2026-11"):
        if w.so_far:
            return f"{_day_month(lo)} – {hi.day} {hi:%b %H:%M}, {w.tz} (so far)"
        last = (w.end - dt.timedelta(microseconds=1)).astimezone(zone)
        if (lo.year, lo.month) == (last.year, last.month):
            return f"{lo.day}–{last.day} {last:%b %Y}, {w.tz}"
        return f"{_day_month(lo)} – {_day_month(last)}, {w.tz}"
    if w.key != "custom":  # named ranges, lookbacks and the periods before them
        return f"{span_words(w.span)} to {_day_month(hi)} {hi:%H:%M} {w.tz}"
    return f"{lo:%Y-%m-%d %H:%M} to {hi:%Y-%m-%d %H:%M} {w.tz}"


def coverage(measured_s: float | None, period_s: float) -> dict:
    """How much of a period was measured: {"measured_s", "period_s", "share", "text"}, text
    e.g. "measured 1 min of 24 h". measured_s None means unknown (a sender gave no start)."""
    if measured_s is None:
        return {"measured_s": None, "period_s": period_s, "share": None,
                "text": f"measured time unknown (of {_human_span(period_s)}): a sender did not "
                        "say when its counting windows started"}
    text = (f"measured {_human_span(measured_s)} of {_human_span(period_s)}" if measured_s
            else f"nothing measured in {_human_span(period_s)}")
    return {"measured_s": measured_s, "period_s": period_s,
            "share": measured_s / period_s if period_s else None, "text": text}


def union_seconds(intervals: Iterable[tuple[dt.datetime, dt.datetime]]) -> float:
    """Length of the union of [start, end) intervals in seconds: overlapping intervals (two
    replicas of a server, a resend) count once."""
    total = 0.0
    cur_s = cur_e = None
    for s, e in sorted(intervals):
        if e <= s:
            continue
        if cur_e is None or s > cur_e:
            if cur_e is not None:
                total += (cur_e - cur_s).total_seconds()
            cur_s, cur_e = s, e
        elif e > cur_e:
            cur_e = e
    if cur_e is not None:
        total += (cur_e - cur_s).total_seconds()
    return total


def measured_seconds(intervals: Iterable[tuple[dt.datetime, dt.datetime]],
                     window: Window) -> float:
    """Length of the union of `intervals` inside `window`, in seconds: the time that was
    actually measured. Overlapping intervals (two senders, a resend) count once."""
    return union_seconds((max(s, window.start), min(e, window.end)) for s, e in intervals)


# ---- Named ranges -------------------------------------------------------------------------------

@dataclass(frozen=True)
class NamedRange:
    key: str
    label: str
    span: dt.timedelta


RANGES: dict[str, NamedRange] = {r.key: r for r in (
    NamedRange("hour", "Last hour", HOUR),
    NamedRange("day", "Last 24 hours", DAY),
    NamedRange("week", "Last 7 days", 7 * DAY),
    NamedRange("month", "Last 30 days", 30 * DAY),
    NamedRange("quarter", "Last 90 days", 90 * DAY),
)}


def ranges(*keys: str) -> dict[str, NamedRange]:
    """The named ranges a page offers, in the order given."""
    return {k: RANGES[k] for k in keys}


def parse_range(value: str | None, allowed: Iterable[str] = RANGES, default: str = "day",
                field: str = "range") -> str:
    """A range key from a query parameter; anything unknown is a 422 naming the field."""
    allowed = list(allowed)
    key = default if value is None else value
    if key not in allowed:
        raise invalid(field, f"one of {', '.join(allowed)}")
    return key


def range_from_request(request: HttpRequest, allowed: Iterable[str] = RANGES,
                       default: str = "day") -> str:
    """Pages: `?range=` or the default; an unknown key is a 404 (a URL that does not exist)."""
    key = request.GET.get("range", default)
    if key not in allowed:
        raise Http404("Unknown range")
    return key


def named(key: str, now: dt.datetime | None = None, step: dt.timedelta = MINUTE) -> Window:
    """A live chart's range `key` ending at the end of the current `step` (so the newest,
    still filling bucket is drawn). Figures take `period()` instead."""
    r = RANGES[key]
    end = floor(now or timezone.now(), step) + step
    return Window(end - r.span, end, r.label, key)


def period(key: str, now: dt.datetime | None = None) -> Window:
    """The period of every figure named `key`: its span of whole finished hours, ending at the
    start of the current hour. The cost model bills whole hours and the KPI rollups are hourly,
    so every surface reading this window reads the same rows and prints the same [start, end)."""
    r = RANGES[key]
    end = floor_hour(now or timezone.now())
    return Window(end - r.span, end, r.label, key)


# ---- Lookbacks of whole hours (recommendations) -------------------------------------------------

LOOKBACK_DAYS: tuple[int, ...] = (7, 30, 60)


def lookback(days: int, now: dt.datetime | None = None) -> Window:
    """`days` of whole finished hours: [start, end) with end the start of the current hour."""
    end = floor_hour(now or timezone.now())
    return Window(end - days * DAY, end, f"Last {days} days", f"lookback-{days}d")


def parse_lookback(value: str | None, default: int = 30, field: str = "lookback") -> int:
    """7, 30 or 60 days; anything else is a 422 naming the field, never a silent default."""
    allowed = ", ".join(str(d) for d in LOOKBACK_DAYS)
    if value in (None, ""):
        return default
    try:
        days = int(value)
    except ValueError:
        raise invalid(field, f"{field} must be one of {allowed} (days)") from None
    if days not in LOOKBACK_DAYS:
        raise invalid(field, f"{field} must be one of {allowed} (days)")
    return days


def lookback_from_request(request: HttpRequest, default: int = 30) -> int:
    """Pages: `?lookback=` or the default; an unknown value is a 404 (a URL that does not
    exist), as `range_from_request` does for ranges."""
    raw = request.GET.get("lookback", str(default))
    if not raw.isdigit() or int(raw) not in LOOKBACK_DAYS:
        raise Http404("Unknown lookback")
    return int(raw)


# ---- Custom start/end ---------------------------------------------------------------------------

MAX_CUSTOM_SPAN = dt.timedelta(days=400)


def parse_time(value: str, field: str, tz: dt.tzinfo | None = dt.UTC) -> dt.datetime:
    """An ISO 8601 date or time, in UTC; one without an offset is read in `tz`, or refused
    when `tz` is None. In UTC because PostgreSQL refuses an offset beyond 15:59, which ISO 8601
    and Python allow."""
    try:
        t = dt.datetime.fromisoformat(value)
    except (TypeError, ValueError):
        raise invalid(field, "must be an ISO 8601 date or time, e.g. 2026-11-01T00:00Z") from None
    if t.tzinfo is None and tz is None:
        raise invalid(field, "give a time zone, e.g. 2026-12-01T08:00Z")
    try:
        return (t if t.tzinfo else t.replace(tzinfo=tz)).astimezone(dt.UTC)
    except OverflowError:  # 0001-01-01T00:00+01:00 is before year 1 once in UTC
        raise invalid(field, "must be a time between years 1 and 9999 in UTC") from None


def custom(start: str, end: str, tz: dt.tzinfo = dt.UTC) -> Window:
    """A user's window; errors name the field (start or end)."""
    if not start or not end:
        raise invalid("start" if not start else "end", "start and end go together")
    lo, hi = parse_time(start, "start", tz), parse_time(end, "end", tz)
    if hi <= lo:
        raise invalid("end", "must be after start")
    if hi - lo > MAX_CUSTOM_SPAN:
        raise invalid("end", f"a window may span at most {MAX_CUSTOM_SPAN.days} days")
    return Window(lo, hi, f"{lo:%Y-%m-%d %H:%M} to {hi:%Y-%m-%d %H:%M} UTC", "custom")


# ---- Calendar months in a team's time zone ------------------------------------------------------

@cache
def time_zone_names() -> frozenset[str]:
    """Every IANA zone name known here (the tzdata package ships them with the server)."""
    return frozenset(available_timezones() | {"UTC"})


def time_zone(name: str, field: str = "time_zone") -> ZoneInfo:
    """An IANA time zone ("Europe/Paris", "UTC"); anything else is a 422 naming the field."""
    if not isinstance(name, str) or name not in time_zone_names():
        raise invalid(field, "must be an IANA time zone name, e.g. Europe/Paris or UTC")
    try:
        return ZoneInfo(name)
    except (ZoneInfoNotFoundError, ValueError):
        raise invalid(field, "must be an IANA time zone name, e.g. Europe/Paris or UTC") from None


def calendar_month(year: int, month: int, tz_name: str = "UTC") -> Window:
    """The month from local midnight on the 1st to local midnight on the 1st of the next, in
    the team's time zone (so a Paris team's November starts at 23:00 UTC on 31 October)."""
    tz = time_zone(tz_name)
    start = dt.datetime(year, month, 1, tzinfo=tz)
    nxt = dt.datetime(year + month // 12, month % 12 + 1, 1, tzinfo=tz)
    return Window(start, nxt, f"{start:%B %Y} ({tz_name})", f"month-{year:04d}-{month:02d}",
                  tz_name)


def month_containing(t: dt.datetime, tz_name: str = "UTC") -> Window:
    local = t.astimezone(time_zone(tz_name))
    return calendar_month(local.year, local.month, tz_name)


def parse_month(value: str, tz_name: str = "UTC", field: str = "month") -> Window:
    """"2026-11" -> that calendar month in the team's time zone; errors name the field."""
    try:
        year_s, month_s = (value or "").split("-")
        year, month = int(year_s), int(month_s)
        if len(year_s) != 4 or not 1 <= year <= 9998 or not 1 <= month <= 12:
            raise ValueError
    except ValueError:
        raise invalid(field, "must be a month as YYYY-MM, e.g. 2026-11") from None
    return calendar_month(year, month, tz_name)


# ---- Calendar periods so far (alerts on "today" and "this month") -------------------------------

@dataclass(frozen=True)
class CalendarSoFar:
    """A local calendar day or month and the part of it that whole `step`s have covered.
    `so_far` is None until the first step of the period has ended (the first hour after
    local midnight): an empty window, not a window without data."""

    period: Window
    so_far: Window | None

    @property
    def start(self) -> dt.datetime:
        return self.period.start

    @property
    def end(self) -> dt.datetime:
        """End of the covered part ([start, end)); equal to start while nothing is covered."""
        return self.so_far.end if self.so_far else self.period.start

    def coverage(self) -> dict:
        """How much of the period the window covers (time that has passed in whole steps,
        not time measured): {"covered_s", "period_s", "share", "text"}, text e.g. "13 h of
        24 h" (a DST day has 23 or 25 hours)."""
        covered = self.so_far.span_s if self.so_far else 0.0
        period = self.period.span_s
        return {"covered_s": covered, "period_s": period, "share": covered / period,
                "text": f"{_human_span(covered) if covered else '0 h'} of "
                        f"{_human_span(period)}"}


def calendar_so_far(unit: str, now: dt.datetime, tz_name: str = "UTC",
                    step: dt.timedelta = HOUR) -> CalendarSoFar:
    """The local day ("day") or month ("month") containing `now` in `tz_name`, and its part
    [local midnight, last whole `step`). Midnights come from the zone's rules, so a day that
    changes clocks is 23 or 25 hours long and its end is the next local midnight."""
    tz = time_zone(tz_name)
    local = now.astimezone(tz)
    if unit == "day":
        start = dt.datetime(local.year, local.month, local.day, tzinfo=tz)
        nxt = local.date() + DAY
        period = Window(start, dt.datetime(nxt.year, nxt.month, nxt.day, tzinfo=tz),
                        f"{local:%Y-%m-%d} ({tz_name})", f"day-{local:%Y-%m-%d}")
    elif unit == "month":
        period = calendar_month(local.year, local.month, tz_name)
    else:
        raise ValueError(f"unit must be day or month, not {unit!r}")
    end = min(floor(now, step), period.end)
    so_far = Window(period.start, end, f"{period.label} so far", f"{period.key}-so-far") \
        if end > period.start else None
    return CalendarSoFar(period, so_far)


def so_far(w: Window, now: dt.datetime | None = None, field: str = "month") -> Window:
    """A period cut at the start of the current hour: a closed month stays whole, the running
    month becomes "so far" (whole finished hours, as every figure counts them); a month that
    has not started (or whose first hour has not finished) is a 422 naming the field."""
    end = floor_hour(now or timezone.now())
    if w.end <= end:
        return w
    if end <= w.start:
        raise invalid(field, "has no finished hour yet: pick a month that has started")
    return Window(w.start, end, f"{w.label} so far", w.key, w.tz, so_far=True)
