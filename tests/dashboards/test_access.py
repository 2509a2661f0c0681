"""Pages and the read API show a user only their own teams; everything else is a 404."""

from __future__ import annotations

import pytest

from tests.support.factories import make_batch, make_host


@pytest.fixture
def seeded(team, other_team, host, post_batch):
    _, token = host
    assert post_batch(token, make_batch(n_per_gpu=30)).status_code == 202
    other_host, other_token = make_host(other_team, name="speech-1", gpus=1)
    assert post_batch(other_token, make_batch(n_per_gpu=5, gpus=(0,))).status_code == 202
    return {"host": host[0], "other_host": other_host}


def login(client, users, name):
    client.force_login(users[name])
    return client


@pytest.mark.django_db
def test_anonymous_is_sent_to_login(client, seeded):
    for url in ("/", "/teams/vision/", f"/teams/vision/hosts/{seeded['host'].id}/"):
        r = client.get(url)
        assert r.status_code == 302 and r.url.startswith("/login/")
    assert client.get("/api/v1/teams/vision/usage").status_code == 401


@pytest.mark.django_db
@pytest.mark.parametrize("name", ["owner", "member"])
def test_team_members_see_the_dashboard(client, users, seeded, name):
    login(client, users, name)
    home = client.get("/")
    assert b"Vision" in home.content and b"Speech" not in home.content
    r = client.get("/teams/vision/?range=hour")
    assert r.status_code == 200
    assert b'id="chart-utilisation"' in r.content and b"gpu-node-1" in r.content
    # Cards come from rollups: 2 GPUs x 29 intervals x 200/210 J.
    usage = r.context["usage"]
    assert usage["totals"]["gpus_reporting"] == 2
    assert usage["totals"]["energy_kwh"] == pytest.approx(29 * (200 + 210) / 3.6e6)
    assert usage["totals"]["avg_util_pct"] == pytest.approx(50.5)
    host = client.get(f"/teams/vision/hosts/{seeded['host'].id}/")
    assert host.status_code == 200 and b"NVIDIA A100-SXM4-40GB" in host.content


@pytest.mark.django_db
def test_outsider_gets_404_everywhere(client, users, seeded):
    login(client, users, "outsider")
    assert b"Vision" not in client.get("/").content
    assert client.get("/teams/vision/").status_code == 404
    assert client.get(f"/teams/vision/hosts/{seeded['host'].id}/").status_code == 404
    assert client.get("/api/v1/teams/vision/usage?range=day").status_code == 404
    # Their own team is fine, but a Vision host addressed through it is not.
    assert client.get("/teams/speech/").status_code == 200
    assert client.get(f"/teams/speech/hosts/{seeded['host'].id}/").status_code == 404


@pytest.mark.django_db
def test_usage_api_returns_series(client, users, seeded):
    login(client, users, "member")
    r = client.get("/api/v1/teams/vision/usage?range=hour")
    assert r.status_code == 200
    data = r.json()
    assert data["team"] == "vision" and data["resolution"] == "minute"
    assert {(s["host"], s["gpu_index"]) for s in data["series"]} == {("gpu-node-1", 0),
                                                                      ("gpu-node-1", 1)}
    assert client.get("/api/v1/teams/vision/usage?range=decade").status_code == 422
    assert client.get("/api/v1/teams").json() == [
        {"slug": "vision", "name": "Vision", "role": "member"}
    ]


@pytest.mark.django_db
def test_unknown_range_is_404(client, users, seeded):
    login(client, users, "owner")
    assert client.get("/teams/vision/?range=decade").status_code == 404


@pytest.mark.django_db
def test_simulated_data_is_badged(client, users, team, host, post_batch):
    _, token = host
    post_batch(token, make_batch(n_per_gpu=3, source="simulated"))
    login(client, users, "owner")
    r = client.get("/teams/vision/?range=hour")
    assert b"Simulated data" in r.content
    assert b"(simulated)" in r.content  # in the trace names


@pytest.mark.django_db
def test_plotly_is_served_locally(client):
    r = client.get("/static/vendor/plotly.min.js")
    assert r.status_code == 200
    assert b"plotly" in b"".join(r.streaming_content)[:2000].lower()


@pytest.mark.django_db
def test_openapi_schema_documents_ingest(client):
    schema = client.get("/api/v1/openapi.json").json()
    body = schema["paths"]["/api/v1/samples"]["post"]["requestBody"]
    assert "samples" in body["content"]["application/json"]["schema"]["properties"]
    assert client.get("/api/v1/docs").status_code == 200


@pytest.mark.django_db
def test_header_team_switcher_costs_one_query_whatever_the_number_of_teams(client, users, team):
    from django.db import connection
    from django.test.utils import CaptureQueriesContext

    from greenops.teams.models import Membership, Team

    client.force_login(users["member"])
    client.get("/teams/vision/")  # warm caches (content types, permissions)
    with CaptureQueriesContext(connection) as one_team:
        client.get("/teams/vision/")
    for i in range(6):
        Membership.objects.create(team=Team.objects.create(name=f"Extra {i}"),
                                  user=users["member"])
    with CaptureQueriesContext(connection) as seven_teams:
        r = client.get("/teams/vision/")
    # The team home's own queries do not depend on how many teams the user is in; the header's
    # switcher must not either (one query for all of them, not one per team).
    assert len(seven_teams) == len(one_team)
    assert r.status_code == 200 and r.content.count(b'title="your role:') == 7
