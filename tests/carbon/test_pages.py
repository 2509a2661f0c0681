"""Carbon pages: access (owner/member/outsider), what they show, and the CSV upload form."""

from __future__ import annotations

import pytest
from django.core.files.uploadedfile import SimpleUploadedFile

from greenops.carbon import emissions_csv
from greenops.carbon.models import HostSite, Run, Site
from greenops.teams.models import Membership, Role
from tests.support.carbon import V2_CSV

PAGES = ("carbon-runs", "carbon-sites")


def url(name: str, team) -> str:
    from django.urls import reverse

    return reverse(name, args=[team.slug])


@pytest.mark.django_db
@pytest.mark.parametrize("name", PAGES)
def test_access(client, users, team, other_team, name):
    assert client.get(url(name, team)).status_code == 302  # anonymous -> login
    for who, status in (("owner", 200), ("member", 200), ("outsider", 404)):
        client.force_login(users[who])
        assert client.get(url(name, team)).status_code == status, who


@pytest.mark.django_db
def test_runs_page_lists_runs_with_source_and_energy(client, users, team, other_team):
    emissions_csv.import_file(team, V2_CSV.encode())
    emissions_csv.import_file(other_team, V2_CSV.replace("hesse", "secret-region").encode())
    client.force_login(users["member"])
    html = client.get(url("carbon-runs", team)).content.decode()
    assert "emissions.csv upload 2.8.4" in html
    assert "0.0885" in html and "0.0750" in html  # total and GPU kWh of run A
    assert "codecarbon estimate" in html
    assert "secret-region" not in html
    assert "/api/codecarbon" in html


@pytest.mark.django_db
def test_upload_form(client, users, team):
    client.force_login(users["member"])
    upload = SimpleUploadedFile("emissions.csv", V2_CSV.encode(), content_type="text/csv")
    r = client.post(url("carbon-upload", team), {"file": upload}, follow=True)
    assert r.status_code == 200
    assert "codecarbon 2.x" in r.content.decode() and Run.objects.count() == 2
    bad = SimpleUploadedFile("emissions.csv", V2_CSV.replace(",0.05,8.3e-05", ",x,8.3e-05", 1)
                             .encode())
    r = client.post(url("carbon-upload", team), {"file": bad}, follow=True)
    assert "line 2, column emissions" in r.content.decode()
    assert Run.objects.count() == 2


@pytest.mark.django_db
def test_upload_needs_membership_and_member_role(client, users, team, other_team):
    client.force_login(users["outsider"])
    upload = SimpleUploadedFile("emissions.csv", V2_CSV.encode())
    assert client.post(url("carbon-upload", team), {"file": upload}).status_code == 404
    Membership.objects.filter(team=team, user=users["member"]).update(role=Role.VIEWER)
    client.force_login(users["member"])
    upload = SimpleUploadedFile("emissions.csv", V2_CSV.encode())
    assert client.post(url("carbon-upload", team), {"file": upload}).status_code == 403
    assert not Run.objects.exists()


@pytest.mark.django_db
def test_sites_page_shows_factors_and_sources(client, users, team, host):
    h, _ = host
    site = Site.objects.create(team=team, name="Rack A", pue=1.25,
                               grid_intensity_override_g_per_kwh=210.0,
                               override_source="green tariff")
    HostSite.objects.create(host=h, site=site)
    client.force_login(users["owner"])
    html = client.get(url("carbon-sites", team)).content.decode()
    assert "1.25" in html and "site Rack A" in html
    assert "site override (Rack A): green tariff" in html


@pytest.mark.django_db
def test_methodology_page(client, users):
    assert client.get("/methodology/").status_code == 302
    client.force_login(users["member"])
    html = client.get("/methodology/").content.decode()
    assert "Uptime Institute" in html and "cloud_regions.csv" in html
    assert "us-east-1" in html and "US state table: VA" in html


def test_methodology_states_the_inference_metric_rules(client, users):
    """Issue 8 items 2-6, 8 and 15: each rule is stated where users read how figures are made."""
    client.force_login(users["member"])
    html = client.get("/methodology/").content.decode()
    for words in ("histogram_quantile", "200 + 200 × 2.5/3 = 366.7 ms",  # percentiles
                  "time to first response", "nv_inference_queue_duration_us",  # Triton
                  "vllm:time_to_first_token_seconds", "vllm:prompt_tokens_total",
                  "nv_energy_consumption", "process_start_time_seconds",  # restarts
                  "shorter than its Content-Length", "One bad window loses only itself",
                  "<code>1e309</code>", "power limit × the interval × 1.2"):
        assert words in html, words
