"""Unknown is not zero (issue 29, item 3): a workload whose GPUs sent no data, market-based
CO2e without a supplier factor and an unpriced host are null with a reason in JSON and CSV and
"unknown (reason)" on pages and in the PDF; a sum with unknown parts follows the one partial-sum
rule ("≥ $X (N hosts unpriced)").

The fleet: host "priced" (p4d.24xlarge, us-east-1, on demand: the bundled snapshot price) whose
GPU 0 reported 1.8 MJ in the last finished hour H; host "lab-box" (an instance type no catalog
knows: unpriced) whose GPU 0 reported 0.9 MJ in H. Workload "ghost" owns GPU 1 of "priced",
which never reported, and counted 500 inferences in H.
"""

from __future__ import annotations

import csv
import datetime as dt
import io
import uuid

import pytest
from django.utils import timezone

from greenops.kpis import metrics
from greenops.windows import floor_hour
from tests.support.factories import make_host


def test_derive_keeps_zero_for_measured_zero_and_unknown_for_no_data():
    # 100 inferences, GPUs that reported 10 minutes at 0 J: a measured zero.
    measured = metrics.derive(metrics.Totals(requests=100, gpu_minutes=10), 3600)
    assert measured["energy_per_inference_j"] == 0.0 and measured["unknown"] == {}
    # 100 inferences, no GPU reported at all: unknown, with the reason, never 0 J.
    none = metrics.derive(metrics.Totals(requests=100), 3600)
    assert none["energy_per_inference_j"] is None
    assert none["unknown"]["energy_per_inference_j"] == \
        "no GPU data for the GPUs serving these inferences"
    k = metrics.without_gpu_data(metrics.derive(metrics.Totals(requests=100), 3600))
    assert k["energy_kwh"] is None and k["co2e_kg"] is None
    assert k["unknown"]["energy_kwh"] == metrics.NO_GPU_DATA
    assert k["cost_usd"] == 0.0  # the cost model's figure stands (nothing billed)
    k = metrics.without_gpu_data(metrics.derive(metrics.Totals(requests=100), 3600),
                                 has_gpus=False)
    assert k["cost_usd"] is None and k["unknown"]["cost_usd"] == metrics.NO_GPUS


@pytest.fixture
def fleet(team, client):
    from greenops.kpis import rollup
    from greenops.teams.models import ApiToken
    from greenops.telemetry.models import GpuHour
    from greenops.workloads.models import Workload

    hour = floor_hour(timezone.now()) - dt.timedelta(hours=1)
    priced, _ = make_host(team, "priced", gpus=2)
    lab, _ = make_host(team, "lab-box", gpus=1)
    lab.instance_type = "x9.imaginary"
    lab.save()
    for gpu, joules in ((priced.gpus.get(index=0), 1.8e6), (lab.gpus.get(index=0), 0.9e6)):
        GpuHour.objects.create(gpu=gpu, bucket=hour, samples=60, util_sum=3000.0, util_n=60,
                               energy_j=joules, util_minutes=60, idle_minutes=0)
    ghost = Workload.objects.create(team=team, name="Ghost", slug="ghost", kind="inference")
    ghost.gpus.add(priced.gpus.get(index=1))
    token = ApiToken.issue(team, "app")[1]
    end = hour + dt.timedelta(minutes=30)
    doc = {"batch_id": str(uuid.uuid4()), "windows": [
        {"workload": "ghost", "start": end.timestamp() - 600, "end": end.timestamp(),
         "requests": 500, "success": 500, "failure": 0}]}
    r = client.post("/api/v1/inference", doc, content_type="application/json",
                    HTTP_AUTHORIZATION=f"Bearer {token}")
    assert r.status_code == 202, r.content
    rollup.rebuild(team, hour, hour + dt.timedelta(hours=1))
    return {"hour": hour, "ghost": ghost}


def test_workload_without_gpu_data_is_unknown_on_the_page_and_null_in_the_api(
        client, users, team, fleet):
    client.force_login(users["member"])
    html = client.get(f"/teams/{team.slug}/kpis/workloads/ghost/?range=day").content.decode()
    assert 'data-kpi="energy_per_inference_j">unknown<' in html
    assert 'data-kpi="energy_kwh">unknown<' in html
    assert metrics.NO_GPU_DATA in html
    assert "0.00 J" not in html
    data = client.get(f"/api/v1/teams/{team.slug}/kpis",
                      {"range": "day", "workload": "ghost"}).json()
    cur = data["current"]
    assert cur["requests"] == 500
    assert cur["energy_per_inference_j"] is None and cur["energy_kwh"] is None
    assert cur["unknown"]["energy_kwh"] == metrics.NO_GPU_DATA
    # The team's overview page lists the workload as unknown, not 0.
    html = client.get(f"/teams/{team.slug}/kpis/?range=day").content.decode()
    assert f"unknown ({metrics.NO_GPU_DATA})" in html


def test_report_csv_pdf_and_page_say_unknown_and_follow_the_partial_sum_rule(
        client, users, team, fleet):
    from pypdf import PdfReader

    from greenops.reports import generate
    from greenops.reports.models import Status, Trigger
    from greenops.reports.month_figures import current_month

    month = current_month(team)
    if floor_hour(timezone.now()) - fleet["hour"] > dt.timedelta(hours=1) or \
            fleet["hour"] < generate.month_figures.month_window(team, month)[0]:
        pytest.skip("the last finished hour is in the previous month")  # the first hour of a month
    report = generate.request(team, month, Trigger.PAGE, enqueue=False)
    report = generate.run(report.id)
    assert report.status == Status.DONE, report.error
    t = report.figures["totals"]
    # lab-box has no price: the total is null with the reason, its known part beside it.
    assert t["cost_usd"] is None and t["unpriced_hosts"] == 1
    assert t["unknown"]["cost_usd"] == "1 host unpriced: lab-box"
    priced = next(h for h in report.figures["hosts"] if h["host"] == "priced")
    assert t["cost_known_usd"] == pytest.approx(priced["cost_usd"]) and priced["cost_usd"] > 0
    assert t["co2e_market_kg"] is None and "no supplier-specific factor" in \
        t["unknown"]["co2e_market_kg"]
    (ghost,) = [w for w in report.figures["workloads"] if w["workload"] == "ghost"]
    assert ghost["energy_kwh"] is None and ghost["energy_per_inference_j"] is None

    rows = list(csv.DictReader(io.StringIO(bytes(report.csv_data).decode())))
    total = next(r for r in rows if r["row_type"] == "total")
    assert total["cost_usd"] == "" and "1 host unpriced: lab-box" in total["note"]
    assert "known part of cost_usd" in total["note"]
    wl = next(r for r in rows if r["row_type"] == "workload" and r["workload"] == "ghost")
    assert wl["it_kwh"] == "" and metrics.NO_GPU_DATA in wl["note"]

    lower = f"≥ {t['cost_known_usd']:,.2f} USD (1 host unpriced)"
    client.force_login(users["member"])
    page = client.get(f"/teams/{team.slug}/reports/{report.id}/").content.decode()
    assert lower in page and f"Ghost: unknown ({metrics.NO_GPU_DATA})" in page
    reader = PdfReader(io.BytesIO(bytes(report.pdf_data)))
    pdf = " ".join(" ".join(p.extract_text() for p in reader.pages).split())
    assert lower in pdf
    assert " ".join(f"Ghost: unknown ({metrics.NO_GPU_DATA})".split()) in pdf
