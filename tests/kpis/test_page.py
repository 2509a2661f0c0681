"""The team KPI page: p50 latency and energy per token cards, small figures with their
significant digits, and the current (still filling) hour left out: every figure counts whole
finished hours (greenops.windows.period), as the cost model and the team home do."""

from __future__ import annotations

import datetime as dt

import pytest
from django.utils import timezone

from greenops.kpis import metrics
from greenops.kpis.models import KpiRollup, Period
from greenops.windows import floor_hour


def _row(team, bucket, energy_j: float, requests: int, tokens: int, cumulative: list[int],
         computed_at: dt.datetime) -> KpiRollup:
    # Request latency as vLLM exports it: a Prometheus histogram, bounds 100/200/400 ms + Inf.
    t = metrics.Totals(requests=requests, success=requests, tokens=tokens,
                       token_requests=requests, gpu_energy_j=energy_j,
                       facility_energy_j=energy_j * 1.2, measured_s=3600.0,
                       latency_buckets={"le_ms": [100, 200, 400], "cumulative": cumulative})
    return KpiRollup.objects.create(team=team, workload=None, period=Period.HOUR,
                                    bucket=bucket, computed_at=computed_at, **t.as_row())


@pytest.mark.django_db
def test_kpi_page_shows_p50_energy_per_token_and_whole_hours(client, users, team):
    now = timezone.now()
    current = floor_hour(now)
    # Two finished hours, and the current hour as the last rollup run wrote it so far.
    _row(team, current - dt.timedelta(hours=2), 3600.0, 1000, 2_000_000, [0, 600, 1000, 1000],
         current - dt.timedelta(minutes=62))
    _row(team, current - dt.timedelta(hours=1), 1800.0, 500, 1_000_000, [0, 200, 500, 500], now)
    _row(team, current, 900.0, 100, 500_000, [0, 50, 100, 100], now)
    client.force_login(users["member"])
    html = client.get(f"/teams/{team.slug}/kpis/?range=day").content.decode()

    def card(key: str) -> str:
        return html.split(f'data-kpi="{key}">', 1)[1].split("<", 1)[0]

    # IT energy: (3,600 + 1,800) J / 3.6e6 J/kWh = 0.0015 kWh -- the filling hour's 900 J left
    # out (0.00175 with it); 3 significant digits, not "0.002".
    assert card("energy_kwh") == "0.00150 kWh"
    # Energy per token: 5,400 J over 3,000,000 tokens = 0.0018 J.
    assert card("energy_per_token_j") == "0.00180 J"
    # p50 over the merged buckets (cumulative 0, 800, 1,500): rank 0.5 x 1,500 = 750 falls in
    # (100, 200] ms: 100 + 100 x 750 / 800 = 193.75 ms (histogram_quantile, linear).
    assert card("latency_p50_ms") == "193.8 ms"
    # p99: rank 1,485 in (200, 400]: 200 + 200 x (1,485 - 800) / 700 = 395.71 ms.
    assert card("latency_p99_ms") == "395.7 ms"
    assert f"rolled up at {now.astimezone(dt.UTC):%Y-%m-%d %H:%M} UTC" in html
    # The window is printed: 24 whole hours to the start of the current hour.
    assert f"24 hours to {current.day} {current:%b %Y %H:%M} UTC" in html

    # The API gives the same window, figures and freshness, as ISO 8601 UTC.
    api = client.get(f"/api/v1/teams/{team.slug}/kpis", {"range": "day"}).json()
    assert api["end"] == current.isoformat()
    assert api["window"]["text"] == f"24 hours to {current.day} {current:%b %Y %H:%M} UTC"
    assert api["as_of"] == now.astimezone(dt.UTC).isoformat()
    assert api["current"]["energy_per_token_j"] == pytest.approx(0.0018)


@pytest.mark.django_db
def test_every_team_page_with_ranges_offers_the_same_ones(client, users, team):
    import re

    now = timezone.now()
    current = floor_hour(now)
    _row(team, current - dt.timedelta(hours=2), 3600.0, 1000, 2_000_000, [0, 600, 1000, 1000],
         now)
    _row(team, current - dt.timedelta(hours=1), 1800.0, 500, 1_000_000, [0, 200, 500, 500], now)
    _row(team, current, 900.0, 100, 500_000, [0, 50, 100, 100], now)
    wl_slug = "ranker"
    from greenops.workloads.models import Workload

    Workload.objects.create(team=team, name="Ranker", slug=wl_slug, kind="inference")
    client.force_login(users["member"])
    offered = {}
    for path in ("", "kpis/", f"kpis/workloads/{wl_slug}/"):
        html = client.get(f"/teams/{team.slug}/{path}").content.decode()
        nav = html.split('aria-label="Time range"', 1)[1].split("</nav>", 1)[0]
        offered[path] = re.findall(r'href="\?range=(\w+)"', nav)
    assert offered[""] == ["hour", "day", "week", "month", "quarter"]
    assert offered["kpis/"] == offered[""] and offered[f"kpis/workloads/{wl_slug}/"] == offered[""]

    # The KPI page's hour is the last finished hour: 1,800 J / 3.6e6 = 0.0005 kWh (the hour
    # before's 3,600 J and the filling hour's 900 J left out), with no change against the
    # hour before it.
    html = client.get(f"/teams/{team.slug}/kpis/?range=hour").content.decode()
    assert 'data-kpi="energy_kwh">0.000500 kWh<' in html
    assert "the hour now filling is counted once it ends" in html and "one hour: no trend" in html
    assert "% vs" not in html


def test_sources_become_named_links_and_the_rest_stays_escaped():
    from dashboards.templatetags.readable import sources

    url = ("https://raw.githubusercontent.com/datareceipts/data-receipts/main/"
           "109-gpu-pricing/hyperscalers.json")
    html = sources(f"catalog <b>2026-11-09</b>; {url}.")
    assert html == ('catalog &lt;b&gt;2026-11-09&lt;/b&gt;; '
                    f'<a href="{url}" title="{url}" rel="noopener">'
                    'hyperscalers.json on raw.githubusercontent.com</a>.')
    assert sources("GreenOps default (GREENOPS_DEFAULT_PUE)") == \
        "GreenOps default (GREENOPS_DEFAULT_PUE)"
    assert sources("") == "" and sources(None) == ""
    # A javascript: or other scheme is never linked.
    assert "<a" not in sources("javascript:alert(1)")


@pytest.mark.django_db
def test_kpi_page_names_a_url_source_instead_of_printing_it(client, users, team):
    url = "https://example.org/prices/catalog.json"
    row = _row(team, floor_hour(timezone.now()) - dt.timedelta(hours=1), 3600.0, 10, 1000,
               [0, 5, 10, 10],
               timezone.now())
    row.cost_source = f"catalog {url}"
    row.save()
    client.force_login(users["member"])
    html = client.get(f"/teams/{team.slug}/kpis/").content.decode()
    assert f'<a href="{url}" title="{url}" rel="noopener">catalog.json on example.org</a>' in html
    assert f"catalog {url}" not in html
