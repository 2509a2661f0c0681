"""KPI pages: overview, workload and training-job pages, access and content."""

from __future__ import annotations

import datetime as dt

import pytest
from django.utils import timezone

from greenops import windows
from greenops.kpis import rollup
from greenops.workloads.models import TrainingJob, Workload
from tests.support import DATA
from tests.support.factories import make_host
from tests.support.kpis import add_gpu_hour, add_windows, stand_in_factors


@pytest.fixture
def live_data(team):
    """One busy hour (the last finished one: figures count whole finished hours) for an
    inference workload on host A, rolled up."""
    hour = windows.floor_hour(timezone.now()) - dt.timedelta(hours=1)
    host, _ = make_host(team, "A", gpus=1)
    gpu = host.gpus.get()
    add_gpu_hour(gpu, hour, 3_600_000, 40.0, 10, simulated=True)
    w = Workload.objects.create(team=team, name="Ranker", kind="inference")
    w.gpus.add(gpu)
    add_windows(w, hour, requests=(1000,), latencies=[20.0] * 990 + [400.0] * 10)
    rollup.rebuild(team, hour, hour + dt.timedelta(hours=1), stand_in_factors())
    job = TrainingJob.objects.create(team=team, workload=w, name="warm-up run",
                                     started_at=hour)
    job.gpus.add(gpu)
    return {"workload": w, "job": job}


def test_overview_shows_cards_with_sources_and_the_simulated_label(client, users, team,
                                                                   live_data):
    client.force_login(users["member"])
    r = client.get(f"/teams/{team.slug}/kpis/")
    assert r.status_code == 200
    html = r.content.decode()
    assert 'data-kpi="energy_kwh">1.000 kWh' in html  # 3.6 MJ
    assert 'data-kpi="facility_energy_kwh">1.500 kWh' in html  # x PUE 1.5
    assert 'data-kpi="co2e_kg">0.600 kg CO2e' in html  # x 400 g/kWh
    assert 'data-kpi="energy_per_inference_j">3,600.00 J' in html
    assert "400 g/kWh (test table: A)" in html and "Includes simulated data" in html
    assert "fig-kpi-energy" in html and "warm-up run" in html


def test_workload_page_has_its_three_charts_and_p99(client, users, team, live_data):
    client.force_login(users["owner"])
    r = client.get(f"/teams/{team.slug}/kpis/workloads/ranker/")
    assert r.status_code == 200
    html = r.content.decode()
    for fig in ("fig-epi", "fig-latency", "fig-throughput"):
        assert f'data-figure="{fig}"' in html and f'id="{fig}"' in html
    # 990 at 20 ms, 10 at 400 ms: p99 (rank 0.99 x 1000 = 990) reaches the cumulative count of
    # the bucket (19.95, 22.39] ms exactly, so histogram_quantile gives its upper bound,
    # 10^(27/20) ms.
    assert 'data-kpi="latency_p99_ms">22.4 ms' in html
    assert r.context["ov"]["current"]["latency_p99_ms"] == pytest.approx(10 ** 1.35, rel=1e-6)


def test_job_page_shows_time_to_train_and_running_state(client, users, team, live_data):
    client.force_login(users["member"])
    r = client.get(f"/teams/{team.slug}/kpis/jobs/{live_data['job'].id}/")
    assert r.status_code == 200
    assert b"running" in r.content and b"not computed yet" in r.content


def test_empty_states_say_what_to_do(client, users, team):
    client.force_login(users["owner"])
    r = client.get(f"/teams/{team.slug}/kpis/")
    assert b"No KPI rollups in this range yet" in r.content
    assert b"No training jobs yet" in r.content
    Workload.objects.create(team=team, name="Idle", kind="inference")
    r = client.get(f"/teams/{team.slug}/kpis/workloads/idle/")
    assert b"No KPI rollups for this workload" in r.content


def test_unknown_range_is_404(client, users, team):
    client.force_login(users["owner"])
    assert client.get(f"/teams/{team.slug}/kpis/?range=decade").status_code == 404


def test_outsider_gets_404_and_anonymous_is_sent_to_login(client, users, team, live_data,
                                                          other_team):
    urls = [f"/teams/{team.slug}/kpis/", f"/teams/{team.slug}/kpis/workloads/ranker/",
            f"/teams/{team.slug}/kpis/jobs/{live_data['job'].id}/"]
    for url in urls:
        assert client.get(url).status_code == 302, url
    client.force_login(users["outsider"])
    for url in urls:
        assert client.get(url).status_code == 404, url
    # Their own team's URL with this team's job or workload id: still 404.
    assert client.get(f"/teams/{other_team.slug}/kpis/jobs/{live_data['job'].id}/"
                      ).status_code == 404
    assert client.get(f"/teams/{other_team.slug}/kpis/workloads/ranker/").status_code == 404
    assert client.get(f"/api/v1/teams/{team.slug}/kpis").status_code == 404


def test_kpi_api_for_members(client, users, team, live_data):
    client.force_login(users["member"])
    r = client.get(f"/api/v1/teams/{team.slug}/kpis?workload=ranker")
    assert r.status_code == 200
    body = r.json()
    assert body["current"]["requests"] == 1000
    assert body["current"]["energy_per_inference_j"] == pytest.approx(3600)
    assert client.get(f"/api/v1/teams/{team.slug}/kpis?range=x").status_code == 422
    assert client.get(f"/api/v1/teams/{team.slug}/kpis?workload=nope").status_code == 404


def test_team_dashboard_links_to_the_kpi_pages(client, users, team):
    client.force_login(users["member"])
    r = client.get(f"/teams/{team.slug}/")
    assert f'href="/teams/{team.slug}/kpis/"'.encode() in r.content


def test_jobs_table_shows_facility_energy_in_kwh(client, users, team, live_data):
    job = live_data["job"]
    job.stopped_at = job.started_at + dt.timedelta(hours=2)
    job.facility_energy_j = 7_200_000.0  # 2 kWh
    job.gpu_energy_j = 4_800_000.0
    job.save()
    client.force_login(users["member"])
    r = client.get(f"/teams/{team.slug}/kpis/")
    row = r.content.decode().split('id="jobs"')[1]
    assert "<td>2.000</td>" in row and "7200000" not in row
    assert "7,200 s (2\xa0hours)" in row


def test_change_is_not_shown_against_a_partly_measured_previous_period(team):
    """A fleet that joined late in the previous period would show +40,000 %: not a trend."""
    from greenops.kpis import queries

    now = timezone.now()
    host, _ = make_host(team, "B", gpus=1)
    gpu = host.gpus.get()
    current_start = queries.window("day", now).start
    for h in range(10):  # ten measured hours now, one hour in the previous day
        add_gpu_hour(gpu, current_start + dt.timedelta(hours=h), 3_600_000, 50.0, 2)
    add_gpu_hour(gpu, current_start - dt.timedelta(hours=2), 360_000, 50.0, 2)
    rollup.rebuild(team, current_start - dt.timedelta(days=1),
                   current_start + dt.timedelta(days=1), stand_in_factors())
    ov = queries.overview(team, None, "day", now)
    assert not ov["comparable"] and ov["previous_partial"]
    assert ov["change_pct"]["energy_kwh"] is None
    # With the previous day measured as fully as this one, the change is shown.
    for h in range(10):
        add_gpu_hour(gpu, current_start - dt.timedelta(hours=23 - h), 1_800_000, 50.0, 2)
    rollup.rebuild(team, current_start - dt.timedelta(days=1), current_start, stand_in_factors())
    ov = queries.overview(team, None, "day", now)
    assert ov["comparable"]
    assert ov["change_pct"]["energy_kwh"] == pytest.approx((10 - 5.1) / 5.1 * 100)


def test_kpi_api_takes_any_window(client, users, team, live_data):
    hour = windows.floor_hour(timezone.now()) - dt.timedelta(hours=1)  # live_data's hour
    client.force_login(users["member"])
    start = (hour + dt.timedelta(minutes=20)).isoformat()
    end = (hour + dt.timedelta(minutes=40)).isoformat()
    r = client.get(f"/api/v1/teams/{team.slug}/kpis", {"start": start, "end": end})
    assert r.status_code == 200, r.content
    data = r.json()
    assert data["start"] == hour.isoformat()  # widened to the hour rollup it reads
    assert data["current"]["energy_kwh"] == pytest.approx(1.0)
    for params, field in [({"start": start}, "end"), ({"start": "yesterday", "end": end}, "start"),
                          ({"start": end, "end": start}, "end"),
                          # before year 1 once in UTC: an OverflowError, a 500, before 94e0c45
                          ({"start": "0001-01-01T00:00+01:00", "end": end}, "start")]:
        r = client.get(f"/api/v1/teams/{team.slug}/kpis", params)
        assert r.status_code == 422 and r.json()["field"] == field


def test_workload_page_says_when_its_gpus_are_shared(client, users, team, live_data):
    other = Workload.objects.create(team=team, name="Reranker", kind="inference")
    other.gpus.add(*live_data["workload"].gpus.all())
    client.force_login(users["member"])
    html = client.get(f"/teams/{team.slug}/kpis/workloads/ranker/").content.decode()
    assert 'id="shared-gpus"' in html and "Reranker" in html
    alone = Workload.objects.create(team=team, name="Solo", kind="inference")
    assert alone.sharing() == []
    assert 'id="shared-gpus"' not in client.get(
        f"/teams/{team.slug}/kpis/workloads/solo/").content.decode()


def test_workload_page_shows_prometheus_percentiles_timings_and_tokens(client, users, team):
    """vLLM /metrics -> agent window -> intake -> hourly rollup -> page, figures by hand."""

    from collectors.scrape import TargetScraper, parse_target
    from greenops.kpis import inference

    data = DATA
    pages = iter(["vllm_metrics_1.txt", "vllm_metrics_2.txt"])
    target = parse_target({"url": "http://vllm:8000/metrics", "kind": "vllm",
                           "workload": "chat"}, "scrape[0]")
    scraper = TargetScraper(target, lambda url, timeout: (data / next(pages)).read_text())
    # In the last finished hour: figures count whole finished hours (windows.period).
    end = windows.floor_hour(timezone.now()).timestamp() - 1800
    assert scraper.scrape(end - 15) is None
    window = scraper.scrape(end)
    Workload.objects.create(team=team, name="Chat", kind="inference")
    answer = inference.accept(team, {"batch_id": "5b1f0c52-8f3e-4a51-9d0c-2e7b6a1c9f30",
                                     "windows": [window]})
    assert answer["refused"] == []
    hour = windows.floor_hour(timezone.now())
    rollup.rebuild(team, hour - dt.timedelta(hours=1), hour + dt.timedelta(hours=1),
                   stand_in_factors())
    client.force_login(users["member"])
    r = client.get(f"/teams/{team.slug}/kpis/workloads/chat/")
    assert r.status_code == 200
    k = r.context["ov"]["current"]
    # e2e cumulative deltas 0, 1, 4, 10, 25, 40, 50, 65, 72, 74, 75 at 0.3 ... 20 s (n = 75):
    # p50 rank 37.5 in (1.5, 2] s: 1.5 + 0.5 x 12.5/15 = 1.9167 s; p99 rank 74.25 in (15, 20]:
    # 15 + 5 x 0.25 = 16.25 s -- what Prometheus' histogram_quantile gives over these buckets.
    assert k["latency_p50_ms"] == pytest.approx(1916.6666667)
    assert k["latency_p99_ms"] == pytest.approx(16_250.0)
    html = r.content.decode()
    assert 'data-kpi="latency_p99_ms">16,250.0 ms' in html
    # Time to first token: 75 new observations, all above 2,560 s in this page (only +Inf
    # moved), so its percentiles are the highest finite bound; mean (13.6 - 9.12) s / 75.
    ttft = next(t for t in k["timings"] if t["name"] == "first_token")
    assert ttft["mean_ms"] == pytest.approx(4480 / 75)
    assert ttft["p50_ms"] == 2_560_000.0 and ttft["n"] == 75
    assert ttft["p50_above"] and not k["latency_p99_above"]
    assert 'data-timing="first_token"' in html and "Time to first token" in html
    assert "≥ </span>2,560,000.0 ms" in html  # said to lie above the highest bound
    # Tokens: 24,000 generated and 31,500 prompt over the same seconds as the 75 requests.
    assert k["tokens"] == 24000 and k["prompt_tokens"] == 31500
    assert k["generation_tokens_per_s"] == pytest.approx(k["throughput_per_s"] * 24000 / 75)
    assert k["prompt_tokens_per_s"] == pytest.approx(k["throughput_per_s"] * 31500 / 75)
