"""greenops.windows: the one owner of time windows. Answers worked out by hand in comments."""

from __future__ import annotations

import datetime as dt

import pytest

from greenops import windows
from greenops.errors import FieldError

UTC = dt.UTC


def test_named_range_ends_with_the_current_step():
    now = dt.datetime(2026, 11, 30, 7, 42, 13, tzinfo=UTC)
    # Minute step: the minute 07:42 is still filling, so the window ends at 07:43 and starts
    # 24 h earlier.
    w = windows.named("day", now, windows.MINUTE)
    assert (w.start, w.end) == (dt.datetime(2026, 11, 29, 7, 43, tzinfo=UTC),
                                dt.datetime(2026, 11, 30, 7, 43, tzinfo=UTC))
    assert w.label == "Last 24 hours" and w.key == "day" and w.span_s == 86400
    # Day step, 90 days: ends at the next UTC midnight (1 Dec), starts 90 days before:
    # 1 Dec - 90 d = 2 Sep (Sep 30 + Oct 31 + Nov 30 = 91 days from 1 Sep).
    q = windows.named("quarter", now, windows.DAY)
    assert (q.start, q.end) == (dt.datetime(2026, 9, 2, tzinfo=UTC),
                                dt.datetime(2026, 12, 1, tzinfo=UTC))
    assert q.previous().end == q.start and q.previous().span == q.span


def test_floor_and_ceil_work_in_utc_whatever_the_input_zone():
    paris = dt.timezone(dt.timedelta(hours=1))
    t = dt.datetime(2026, 11, 30, 8, 42, tzinfo=paris)  # 07:42 UTC
    assert windows.floor_hour(t) == dt.datetime(2026, 11, 30, 7, tzinfo=UTC)
    assert windows.floor_day(t) == dt.datetime(2026, 11, 30, tzinfo=UTC)
    assert windows.ceil(t, windows.HOUR) == dt.datetime(2026, 11, 30, 8, tzinfo=UTC)
    exact = dt.datetime(2026, 11, 30, 8, tzinfo=UTC)
    assert windows.ceil(exact, windows.HOUR) == exact


def test_lookback_is_whole_finished_hours():
    now = dt.datetime(2026, 11, 30, 7, 42, tzinfo=UTC)
    w = windows.lookback(7, now)
    assert w.end == dt.datetime(2026, 11, 30, 7, tzinfo=UTC)
    assert w.start == dt.datetime(2026, 11, 23, 7, tzinfo=UTC)
    assert windows.parse_lookback(None) == 30 and windows.parse_lookback("60") == 60
    for bad in ("14", "x", "-7"):
        with pytest.raises(FieldError) as err:
            windows.parse_lookback(bad)
        assert err.value.status == 422 and err.value.field == "lookback"


def test_custom_window_validates_and_names_the_field():
    w = windows.custom("2026-11-30T07:00+01:00", "2026-11-30T07:01Z")
    assert w.start == dt.datetime(2026, 11, 30, 6, tzinfo=UTC)  # +01:00 read as an offset
    assert w.span_s == 3660
    naive = windows.custom("2026-11-30", "2026-12-01")  # no offset: UTC
    assert naive.span_s == 86400 and naive.start.tzinfo is not None
    for start, end, field in [("", "2026-11-30", "start"), ("2026-11-30", "", "end"),
                              ("yesterday", "2026-11-30", "start"),
                              ("2026-11-30", "2026-11-29", "end"),
                              ("2026-11-30", "2026-11-30", "end"),
                              ("2025-01-01", "2026-11-30", "end")]:  # > 400 days
        with pytest.raises(FieldError) as err:
            windows.custom(start, end)
        assert err.value.status == 422 and err.value.field == field, (start, end)


def test_calendar_month_in_the_team_time_zone():
    # Paris is UTC+1 in November: the month runs from 31 Oct 23:00 UTC to 30 Nov 23:00 UTC,
    # 30 days = 2,592,000 s.
    w = windows.calendar_month(2026, 11, "Europe/Paris")
    assert w.start == dt.datetime(2026, 10, 31, 23, tzinfo=UTC)
    assert w.end == dt.datetime(2026, 11, 30, 23, tzinfo=UTC)
    assert w.span_s == 30 * 86400 and w.key == "month-2026-11"
    # October in Paris holds the switch from summer time (UTC+2) back to UTC+1 on 25 Oct 2026:
    # from 30 Sep 22:00 UTC to 31 Oct 23:00 UTC = 31 days + 1 hour.
    oct_ = windows.calendar_month(2026, 10, "Europe/Paris")
    assert oct_.start == dt.datetime(2026, 9, 30, 22, tzinfo=UTC)
    assert oct_.span == dt.timedelta(days=31, hours=1)
    # December rolls over into the next year.
    dec = windows.parse_month("2026-12", "UTC")
    assert dec.end == dt.datetime(2027, 1, 1, tzinfo=UTC)
    # 30 Nov 23:30 UTC is already 1 December in Paris.
    t = dt.datetime(2026, 11, 30, 23, 30, tzinfo=UTC)
    assert windows.month_containing(t, "Europe/Paris").key == "month-2026-12"
    assert windows.month_containing(t, "UTC").key == "month-2026-11"


@pytest.mark.parametrize("value", ["2026-13", "2026", "26-11", "November", "", "0000-01",
                                   "9999-12"])
def test_bad_month_names_the_field(value):
    with pytest.raises(FieldError) as err:
        windows.parse_month(value)
    assert err.value.field == "month"


@pytest.mark.parametrize("name", ["Mars/Olympus", "", "europe/paris ", "../etc/passwd"])
def test_unknown_time_zone_names_the_field(name):
    with pytest.raises(FieldError) as err:
        windows.time_zone(name)
    assert err.value.field == "time_zone"


def test_measured_seconds_is_the_union_inside_the_window():
    t0 = dt.datetime(2026, 11, 30, tzinfo=UTC)
    w = windows.Window(t0, t0 + windows.DAY)
    m = dt.timedelta(minutes=1)
    intervals = [
        (t0 - m, t0 + m),  # 1 min before the window: only 60 s inside
        (t0 + 10 * m, t0 + 12 * m),  # 120 s
        (t0 + 11 * m, t0 + 13 * m),  # overlaps the previous by 60 s: adds 60 s
        (t0 + 11 * m, t0 + 12 * m),  # wholly inside an earlier interval: adds nothing
        (t0 + 2 * windows.DAY, t0 + 3 * windows.DAY),  # after the window
    ]
    # 60 + 120 + 60 = 240 s
    assert windows.measured_seconds(intervals, w) == 240.0
    assert windows.measured_seconds([], w) == 0.0
    assert w.coverage(60.0)["text"] == "measured 1 min of 24 h"
    assert w.coverage(60.0)["share"] == pytest.approx(60 / 86400)
    assert w.coverage(None)["share"] is None


def test_elapsed_seconds_stop_at_now():
    hour = dt.datetime(2026, 11, 30, 7, tzinfo=UTC)
    w = windows.Window(hour, hour + windows.HOUR)
    assert w.elapsed_s(hour + dt.timedelta(minutes=15)) == 900.0
    assert w.elapsed_s(hour + windows.DAY) == 3600.0
    assert w.elapsed_s(hour - windows.HOUR) == 0.0


def test_a_window_must_be_aware_and_not_empty():
    t = dt.datetime(2026, 11, 30)
    with pytest.raises(ValueError):
        windows.Window(t, t + windows.HOUR)
    with pytest.raises(ValueError):
        windows.Window(t.replace(tzinfo=UTC), t.replace(tzinfo=UTC))


def test_parse_range_names_the_field():
    assert windows.parse_range(None, ("day", "week")) == "day"
    with pytest.raises(FieldError) as err:
        windows.parse_range("fortnight", ("day", "week"))
    assert err.value.field == "range" and "day, week" in err.value.message


def test_lookback_from_request_404s_on_unknown_values(rf):
    # Pages: an unknown lookback is a URL that does not exist, not a silent default.
    from django.http import Http404
    assert windows.lookback_from_request(rf.get("/")) == 30
    assert windows.lookback_from_request(rf.get("/", {"lookback": "7"})) == 7
    for bad in ("14", "x", "-7", ""):
        with pytest.raises(Http404):
            windows.lookback_from_request(rf.get("/", {"lookback": bad}))


def test_local_days_follow_local_midnights_across_both_dst_changes():
    """Europe/Paris, March and October 2026: the spring day is 23 h, the autumn day 25 h."""
    from zoneinfo import ZoneInfo

    from greenops.windows import local_days

    paris = ZoneInfo("Europe/Paris")
    start = dt.datetime(2026, 3, 28, 12, tzinfo=dt.UTC)  # Saturday noon
    end = dt.datetime(2026, 3, 30, 8, tzinfo=dt.UTC)  # Monday 10:00 CEST
    days = local_days(start, end, paris)
    # 28 Mar 00:00 CET = 27 Mar 23:00 UTC; 29 Mar 00:00 CET = 28 Mar 23:00 UTC;
    # 30 Mar 00:00 CEST = 29 Mar 22:00 UTC: the 29th lasts 23 hours.
    assert days == [(dt.datetime(2026, 3, 27, 23, tzinfo=dt.UTC),
                     dt.datetime(2026, 3, 28, 23, tzinfo=dt.UTC)),
                    (dt.datetime(2026, 3, 28, 23, tzinfo=dt.UTC),
                     dt.datetime(2026, 3, 29, 22, tzinfo=dt.UTC))]
    (autumn,) = local_days(dt.datetime(2026, 10, 25, 5, tzinfo=dt.UTC),
                           dt.datetime(2026, 10, 26, 5, tzinfo=dt.UTC), paris)
    assert autumn[1] - autumn[0] == dt.timedelta(hours=25)  # 25 Oct 2026, clocks go back
    assert local_days(end, end, paris) == []


def test_bucket_count_is_the_number_of_buckets_without_building_them():
    """host-hour coverage counts hours per host on every KPI page view: by arithmetic, not by
    listing a quarter's 2,160 hour starts for each of a fleet's hosts."""
    from greenops.windows import HOUR, Window

    t0 = dt.datetime(2026, 3, 29, 0, 59, 59, tzinfo=dt.UTC)
    for start_s, end_s in ((0, 1), (0, 3600), (1, 3601), (1, 7200), (3599, 3601),
                           (0, 90 * 86400 + 17), (1800, 1801)):
        w = Window(t0 + dt.timedelta(seconds=start_s), t0 + dt.timedelta(seconds=end_s))
        for step in (HOUR, dt.timedelta(minutes=5), dt.timedelta(days=1)):
            assert w.bucket_count(step) == len(w.buckets(step)), (start_s, end_s, step)
    # By hand: 00:59:59 to 02:00:00 touches the hours 00, 01 -> 2 (and 02:00 starts none).
    assert Window(t0, dt.datetime(2026, 3, 29, 2, tzinfo=dt.UTC)).bucket_count(HOUR) == 2
