"""Operators see trouble: an agent that stopped sending, and a data lag (batches the API
accepted that no worker has stored yet), on the hosts page, in the hosts API, in whoami and in
`greenops-agent status`."""

from __future__ import annotations

import datetime as dt

import pytest
from django.utils import timezone

from collectors.cli_host import server_view_lines
from greenops.telemetry.host_status import host_statuses
from greenops.telemetry.models import Host, IngestBatch
from tests.support.factories import make_host

NOW = dt.datetime(2026, 11, 30, 12, 0, tzinfo=dt.UTC)


def _pending(host, received_at, status=IngestBatch.Status.PENDING):
    return IngestBatch.objects.create(host=host, received_at=received_at, n_samples=80,
                                      payload=b"{}", status=status)


@pytest.fixture
def fleet(team):
    silent, _ = make_host(team, "silent")
    busy, token = make_host(team, "busy")
    never, _ = make_host(team, "never")
    Host.objects.filter(id=silent.id).update(last_seen=NOW - dt.timedelta(minutes=10))
    Host.objects.filter(id=busy.id).update(last_seen=NOW - dt.timedelta(seconds=5))
    _pending(busy, NOW - dt.timedelta(seconds=90))
    _pending(busy, NOW - dt.timedelta(seconds=30))
    _pending(busy, NOW - dt.timedelta(seconds=300), status=IngestBatch.Status.DONE)  # stored
    _pending(silent, NOW - dt.timedelta(seconds=999), status=IngestBatch.Status.DONE)
    return {"silent": silent, "busy": busy, "never": never, "busy_token": token}


@pytest.mark.django_db
def test_statuses_tell_stopped_sending_and_data_lag(team, fleet):
    by_name = {s.host.name: s for s in host_statuses(team, now=NOW)}
    silent, busy, never = by_name["silent"], by_name["busy"], by_name["never"]
    # Silent: last batch 10 min = 600 s ago, past the 120 s online window.
    assert (silent.online, silent.stopped_sending, silent.silent_s) == (False, True, 600.0)
    # Never sent: offline, but not "stopped" -- it never started.
    assert (never.online, never.stopped_sending, never.silent_s) == (False, False, None)
    # Busy: online; two pending batches (the done one does not count), oldest 90 s old.
    assert (busy.online, busy.stopped_sending) == (True, False)
    assert (busy.pending_batches, busy.data_lag_s) == (2, 90.0)
    assert (silent.pending_batches, silent.data_lag_s) == (0, None)


@pytest.mark.django_db
def test_a_revoked_host_that_went_quiet_is_not_reported_as_stopped(team, fleet):
    Host.objects.filter(id=fleet["silent"].id).update(revoked_at=NOW)
    silent = {s.host.name: s for s in host_statuses(team, now=NOW)}["silent"]
    assert silent.stopped_sending is False


@pytest.mark.django_db
def test_hosts_page_and_api_show_the_trouble(client, team, users, fleet):
    client.force_login(users["member"])
    html = client.get(f"/teams/{team.slug}/hosts/").content.decode()
    assert "agent stopped sending" in html
    assert "2 batches not yet stored, oldest" in html
    api = {h["name"]: h for h in client.get(f"/api/v1/teams/{team.slug}/hosts").json()}
    assert api["silent"]["stopped_sending"] is True
    assert api["busy"]["pending_batches"] == 2 and api["busy"]["data_lag_s"] > 0


@pytest.mark.django_db
def test_whoami_gives_the_agent_the_server_side_view(client, fleet):
    doc = client.get("/api/v1/agent/whoami",
                     HTTP_AUTHORIZATION=f"Bearer {fleet['busy_token']}").json()
    assert doc["host"] == "busy" and doc["gpus"] == 2
    assert doc["pending_batches"] == 2
    # Stamped at NOW - 90 s, read at the real clock: at least those 90 s old.
    expected_min_s = (timezone.now() - (NOW - dt.timedelta(seconds=90))).total_seconds() - 5
    assert doc["data_lag_s"] >= expected_min_s
    assert doc["silent_s"] >= (timezone.now() - NOW).total_seconds() - 5


def test_agent_status_lines_from_the_server_view():
    assert server_view_lines({"silent_s": 600.0, "pending_batches": 0, "data_lag_s": None}) == [
        "last batch:      600 s ago -- AGENT STOPPED SENDING? (is greenops-agent run running?)",
        "data lag:        none (every accepted batch is stored)",
    ]
    assert server_view_lines({"silent_s": 4.2, "pending_batches": 3, "data_lag_s": 75.4}) == [
        "last batch:      4 s ago",
        "data lag:        3 batch(es) accepted, not yet stored; oldest 75 s (server workers "
        "down or behind)",
    ]
    assert server_view_lines({"silent_s": None, "pending_batches": 0})[0] == (
        "last batch:      none received yet by the server")
    assert server_view_lines({"host": "old-server"}) == []  # an older server says nothing
