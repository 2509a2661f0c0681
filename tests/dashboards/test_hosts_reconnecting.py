"""An agent draining its spool after an outage shows as "reconnecting, N min behind" on the host
list and the host page, not as a plain online -- nor offline, which it showed while its backoff
ran (issue 30)."""

from __future__ import annotations

from tests.support.factories import make_batch


def test_a_host_draining_its_spool_is_reconnecting_and_says_how_far_behind(
        client, team_roles, team, host, post_batch):
    h, token = host
    # The agent's first batch after a 3-minute outage: 36 batches waiting, the oldest 180 s.
    r = post_batch(token, make_batch(spool={"depth": 36, "oldest_age_s": 180.0}))
    assert r.status_code == 202
    client.force_login(team_roles["viewer"])
    listing = client.get(f"/teams/{team.slug}/hosts/").content.decode()
    row = listing.split('data-host="gpu-node-1"')[1].split("</tr>")[0]
    assert "reconnecting, 3 min behind" in row and "status online" not in row
    page = client.get(f"/teams/{team.slug}/hosts/{h.id}/").content.decode()
    assert "reconnecting, 3 min behind" in page
    # Drained: the agent reports an empty spool, and the host is plainly online again.
    assert post_batch(token, make_batch(spool={"depth": 0, "oldest_age_s": None})
                      ).status_code == 202
    page = client.get(f"/teams/{team.slug}/hosts/{h.id}/").content.decode()
    assert "reconnecting" not in page and "status online" in page


def test_one_batch_in_flight_or_a_young_spool_is_just_online(client, team_roles, team, host,
                                                             post_batch):
    h, token = host
    assert post_batch(token, make_batch(spool={"depth": 3, "oldest_age_s": 27.0})
                      ).status_code == 202  # 27 s: an ordinary send, not an outage
    client.force_login(team_roles["viewer"])
    page = client.get(f"/teams/{team.slug}/hosts/{h.id}/").content.decode()
    assert "reconnecting" not in page and "status online" in page
