"""A workload whose GPUs sit on an unpriced host has an unknown cost, never $0 or a partial sum.

Only the team total's "unknown" was tested before; a workload cost that counted the unpriced
host as $0 passed. Here workload "ranker" runs on GPU 0 of a priced p4d host and on the only GPU
of a host whose instance type has no price in the catalog.
"""

from __future__ import annotations

import datetime as dt

import pytest
from django.utils import timezone

from greenops.costs.accounting import collect, team_costs
from greenops.workloads.models import Workload
from tests.support.costs import END, NOW, add_hours, enrolled, set_price
from tests.support.factories import make_host


def two_hosts(team, end: dt.datetime):
    """Host A: p4d.24xlarge on demand, priced at $32.7726/h (2 GPUs -> $16.3863 per GPU-hour).
    Host B: g6.xlarge in eu-west-1, no price in the catalog. 10 hours of data on every GPU."""
    a, _ = make_host(team, "A", gpus=2)
    b, _ = make_host(team, "B", gpus=1)
    b.instance_type, b.region = "g6.xlarge", "eu-west-1"
    b.save()
    for host in (a, b):
        enrolled(host, end - dt.timedelta(days=90))
        for gpu in host.gpus.all():
            add_hours(gpu, 10, 70.0, end=end)
    set_price("p4d.24xlarge", "us-east-1", "on_demand", "32.7726")
    return a, b


@pytest.mark.django_db
def test_workload_on_an_unpriced_host_has_unknown_cost(team):
    a, b = two_hosts(team, END)
    mixed = Workload.objects.create(team=team, name="ranker", kind="inference")
    mixed.gpus.add(a.gpus.get(index=0), b.gpus.get())
    priced_only = Workload.objects.create(team=team, name="trainer", kind="training")
    priced_only.gpus.add(a.gpus.get(index=1))
    out = team_costs(collect(team, 7, NOW))
    by_slug = {w["slug"]: w for w in out["workloads"]}
    # Not $163.863 (A's 10 GPU-hours, B's counted as $0) and not $0: unknown.
    assert by_slug["ranker"]["cost_usd"] is None
    # The workload on the priced host only keeps its figure: 10 h x 32.7726 / 2 = $163.863.
    assert by_slug["trainer"]["cost_usd"] == pytest.approx(163.863)
    assert out["total_cost_usd"] is None
    assert any("g6.xlarge" in p for p in out["problems"])


@pytest.mark.django_db
def test_costs_page_shows_the_workload_cost_as_unknown_with_the_reason(client, users, team):
    end = timezone.now().replace(minute=0, second=0, microsecond=0)
    a, b = two_hosts(team, end)
    w = Workload.objects.create(team=team, name="ranker", kind="inference")
    w.gpus.add(a.gpus.get(index=0), b.gpus.get())
    client.force_login(users["member"])
    html = client.get(f"/teams/{team.slug}/costs/?lookback=7").content.decode()
    table = html[html.index('id="workload-costs"'):]
    row = table[table.index("ranker"):table.index("</tr>", table.index("ranker"))]
    assert "$" not in row  # neither $0.00 nor the priced host's share
    assert "no price" in row
