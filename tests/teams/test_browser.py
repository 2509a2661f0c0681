"""People journeys in Chromium: an owner invites someone who joins through the link, and a
member uploads a codecarbon emissions.csv and sees the runs."""

from __future__ import annotations

import pytest
from django.contrib.auth.models import User

from tests.support.browser import log_in
from tests.support.carbon import RUN_A, V2_CSV

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]


def test_owner_invites_and_the_invitee_joins(live_server, page, users, team,  # noqa: F811
                                             settings):
    settings.EMAIL_BACKEND = "django.core.mail.backends.console.EmailBackend"
    User.objects.create_user("dana", "dana@example.com", "pw-dana")
    log_in(page, live_server.url, "owner", "pw-owner")
    page.goto(f"{live_server.url}/teams/{team.slug}/members/")
    page.get_by_label("Email").fill("Dana@Example.com")
    page.locator("#id_role").select_option("viewer")
    page.get_by_role("button", name="Send invitation").click()
    link = page.locator("#invite-link").inner_text()
    assert link.startswith(live_server.url)
    assert "dana@example.com" in page.locator("#pending-invitations").inner_text().lower()

    # A second, separate browser session (its own cookies) for the invitee.
    context = page.context.browser.new_context()
    other = context.new_page()
    other.set_default_timeout(20_000)
    log_in(other, live_server.url, "dana", "pw-dana")
    other.goto(link)
    other.get_by_role("button", name="Join as dana").click()
    other.goto(f"{live_server.url}/")
    assert "Vision" in other.locator("table.list").inner_text()
    other.goto(f"{live_server.url}/teams/{team.slug}/")
    other.get_by_role("heading", name="Vision").wait_for()
    context.close()
    assert team.memberships.get(user__username="dana").role == "viewer"


def test_member_uploads_emissions_csv(live_server, page, users, team, tmp_path):  # noqa: F811
    csv = tmp_path / "emissions.csv"
    csv.write_text(V2_CSV)
    log_in(page, live_server.url, "member", "pw-member")
    page.goto(f"{live_server.url}/teams/{team.slug}/carbon/runs/")
    page.locator("input[type=file]").set_input_files(str(csv))
    page.get_by_role("button", name="Upload").click()
    page.get_by_text(RUN_A[:8]).first.wait_for()
    assert "codecarbon" in page.content()


def test_owner_renames_then_deletes_the_team(live_server, page, users, team):  # noqa: F811
    from greenops.teams.models import Team

    log_in(page, live_server.url, "owner", "pw-owner")
    page.goto(f"{live_server.url}/teams/{team.slug}/")
    page.get_by_role("link", name="Settings").first.click()
    page.get_by_label("Name").fill("Vision Research")
    page.get_by_role("button", name="Rename").click()
    page.get_by_role("heading", name="Vision Research: settings").wait_for()
    assert "Vision Research" in page.locator("header.top").inner_text()  # the switcher too
    page.get_by_label("to confirm").fill("Vision Research")
    page.get_by_role("button", name="Delete this team").click()
    page.wait_for_url(f"{live_server.url}/**")
    assert not Team.objects.filter(id=team.id).exists()


def test_owner_picks_the_team_time_zone(live_server, page, users, team):  # noqa: F811
    log_in(page, live_server.url, "owner", "pw-owner")
    page.goto(f"{live_server.url}/teams/{team.slug}/settings/")
    page.get_by_label("Time zone").select_option("America/New_York")
    page.get_by_role("button", name="Save time zone").click()
    page.get_by_text("Report months now follow America/New_York").wait_for()
    team.refresh_from_db()
    assert team.time_zone == "America/New_York"
