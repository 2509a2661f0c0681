"""The team home's cost figures come from a per-team, per-hour snapshot (beat takes it on the
rollups queue; a page without one queues dashboards.tasks.refresh_team_home, tests/dashboards/
test_home_cold.py): the same figures as computing them,
"as of" the time they were taken, never another team's."""

from __future__ import annotations

import datetime as dt
from unittest import mock

import pytest
from django.core.cache import cache

from tests.support.cards import card
from tests.support.factories import make_host

NOW = dt.datetime(2026, 11, 30, 12, 30, tzinfo=dt.UTC)
HOUR = dt.timedelta(hours=1)


@pytest.fixture(autouse=True)
def _no_snapshots(team, other_team):
    """Only these teams' snapshot keys around NOW (the cache is a shared Redis database: no
    clear()); a run before may have left some under the same team ids."""
    from dashboards import headline

    keys = [headline.snapshot_key(t.id, NOW.replace(minute=0) + k * HOUR)
            for t in (team, other_team) for k in (-1, 0, 1)]
    cache.delete_many(keys)
    yield
    cache.delete_many(keys)


def priced_team(team, name: str, usd_per_hour: float, hours: int = 5):
    """A host at a fixed team price override, 1 GPU reporting `hours` whole hours before NOW:
    the cost card is hours x price."""
    from greenops.costs.overrides import PriceOverride
    from greenops.telemetry.models import GpuHour

    host, _ = make_host(team, name, gpus=1)
    PriceOverride.objects.create(team=team, kind="hourly", instance_type=host.instance_type,
                                 usd_per_hour=usd_per_hour, source="contract",
                                 valid_from=NOW - dt.timedelta(days=400))
    end = NOW.replace(minute=0)
    GpuHour.objects.bulk_create([
        GpuHour(gpu=host.gpus.get(), bucket=end - (i + 1) * HOUR, samples=60, util_sum=3000.0,
                util_n=60, energy_j=1000.0) for i in range(hours)])
    return host


def cost_card(html: str) -> str:
    return card(html, "cost_usd")


def test_snapshot_serves_the_page_and_says_as_of(client, users, team):
    """5 hours x $2 = $10.00 from the snapshot the first view's refresh stored (in-process
    after its response), with collect not called at all by the second view."""
    from greenops.costs import month_cost

    priced_team(team, "node-a", 2.0)
    client.force_login(users["owner"])
    with mock.patch("django.utils.timezone.now", return_value=NOW):
        first = client.get(f"/teams/{team.slug}/?range=day").content.decode()
        with mock.patch.object(month_cost, "team_usage", side_effect=AssertionError("team_usage")):
            second = client.get(f"/teams/{team.slug}/?range=day").content.decode()
    assert cost_card(first) == "unknown" and "being computed" in first
    assert cost_card(second) == "$10.00"
    assert "Cost figures and recommendations as of 12:30 UTC" in second


def test_beat_snapshot_covers_every_range_and_the_previous_hour_is_labelled(client, users,
                                                                             team):
    from dashboards import tasks
    from greenops.costs import month_cost

    priced_team(team, "node-a", 2.0)
    client.force_login(users["owner"])
    with mock.patch("django.utils.timezone.now", return_value=NOW):
        assert tasks.snapshot_team_homes() == 1
        assert tasks.snapshot_team_homes() == 0  # fresh: not retaken
    later = NOW + HOUR  # the next hour, before beat took its snapshot: last hour's, labelled
    with mock.patch("django.utils.timezone.now", return_value=later), \
            mock.patch.object(month_cost, "team_usage", side_effect=AssertionError("team_usage")):
        for key in ("hour", "day", "week", "month", "quarter"):
            html = client.get(f"/teams/{team.slug}/?range={key}").content.decode()
            assert "as of 12:30 UTC, for windows ending 12:00 UTC" in html, key


def test_a_snapshot_never_shows_another_teams_figures(client, users, team, other_team):
    """Team A ($2/h) snapshotted first; team B ($7/h, 5 h = $35.00) shows its own."""
    from dashboards import headline
    from greenops.teams.models import Membership, Role

    priced_team(team, "node-a", 2.0)
    priced_team(other_team, "node-b", 7.0)
    Membership.objects.create(team=other_team, user=users["owner"], role=Role.MEMBER)
    client.force_login(users["owner"])
    with mock.patch("django.utils.timezone.now", return_value=NOW):
        headline.take_snapshot(team, NOW)
        a = client.get(f"/teams/{team.slug}/?range=day").content.decode()
        client.get(f"/teams/{other_team.slug}/?range=day")  # queues B's own refresh
        b = client.get(f"/teams/{other_team.slug}/?range=day").content.decode()
    assert cost_card(a) == "$10.00"
    assert cost_card(b) == "$35.00"


@pytest.mark.django_db
def test_an_agent_restarting_with_the_same_gpus_keeps_the_snapshots(team, client):
    """Every agent start re-sends its inventory. Unchanged GPUs are not saved again, so the
    snapshots stay valid (a Gpu save makes them all stale); a changed power limit is saved
    and does make them stale, since it can change what a GPU costs to run."""
    import orjson

    from dashboards import headline

    host, token = make_host(team, "restarts", gpus=2)
    gpus = [{"index": g.index, "uuid": g.uuid, "name": g.name, "power_limit_w": g.power_limit_w,
             "memory_total_mib": g.memory_total_mib, "max_sm_clock_mhz": g.max_sm_clock_mhz,
             "max_mem_clock_mhz": g.max_mem_clock_mhz} for g in host.gpus.order_by("index")]

    def send(doc) -> None:
        r = client.post("/api/v1/inventory", orjson.dumps(doc), content_type="application/json",
                        HTTP_AUTHORIZATION=f"Bearer {token}")
        assert r.status_code == 200, r.content

    key = headline.snapshot_key(team.id, NOW.replace(minute=0))
    send({"gpus": gpus})
    assert headline.snapshot_key(team.id, NOW.replace(minute=0)) == key
    send({"gpus": [dict(gpus[0], power_limit_w=300.0), gpus[1]]})
    assert host.gpus.get(index=0).power_limit_w == 300.0
    assert headline.snapshot_key(team.id, NOW.replace(minute=0)) != key


def test_an_edit_makes_only_its_own_teams_snapshots_stale(team, other_team):
    """A team's host, GPU, price override or workload edit changes that team's snapshot key
    only (the other team's stored figures stay valid); a price in the shared catalog changes
    every team's."""
    from dashboards import headline
    from greenops.costs.models import Price
    from greenops.workloads.models import Workload

    host = priced_team(team, "node-a", 2.0)
    priced_team(other_team, "node-b", 7.0)
    hour = NOW.replace(minute=0)

    def keys() -> tuple[str, str]:
        return headline.snapshot_key(team.id, hour), headline.snapshot_key(other_team.id, hour)

    for edit in (lambda: host.save(),
                 lambda: host.gpus.get().save(),
                 lambda: team.price_overrides.get().save(),
                 lambda: team.price_overrides.get().delete(),
                 lambda: Workload.objects.create(team=team, name="serving")):
        a, b = keys()
        edit()
        a2, b2 = keys()
        assert a2 != a and b2 == b
    a, b = keys()
    Price.objects.first().save()
    a2, b2 = keys()
    assert a2 != a and b2 != b


def test_a_hosts_first_pricing_is_not_an_edit_but_a_change_of_terms_is(team):
    """The first pricing of a host records the terms and site factors it already had, in force
    since ever: the team's kept figures stay valid. A later change of terms (in force from the
    edit) makes them stale."""
    from dashboards import headline
    from greenops.carbon.accounting import ensure_factors
    from greenops.costs.models import HostTermsPeriod

    host, _ = make_host(team, "node-new", gpus=1)
    before = headline._generations(team.id)
    HostTermsPeriod.ensure(host)
    ensure_factors(host)
    assert HostTermsPeriod.objects.filter(host=host).count() == 1
    assert headline._generations(team.id) == before
    host.purchase_option = "spot"
    host.save()  # the Host save itself is an edit too; the terms period it records is another
    assert HostTermsPeriod.objects.filter(host=host).count() == 2
    assert headline._generations(team.id) != before
