"""Rows add up (issue 29, item 5): in the CSV and the PDF of a report -- the running month
included -- the host rows plus an explicit "not attributed" row equal the total, to the cent and
the Wh, and so do the workload rows plus theirs.

The running month (team in UTC, "now" = 2026-12-04 14:05 UTC, so December so far is
[1 Dec 00:00, 4 Dec 14:00) = 86 whole hours; the filling 14:00 hour is in no figure):
  host "a" (p4d.24xlarge on demand, 2 GPUs): GPU 0 reports 1.8 MJ (0.5 kWh) every hour of the
    month so far and in the filling hour; GPU 1 reports nothing;
  host "gone" (1 GPU): 0.9 MJ (0.25 kWh) in each of 10 hours on 2 Dec, rolled up, then the host
    is deleted -- its energy stays in the team's KPI rollups (the total) but no host row claims
    it: not attributed = 10 x 0.25 = 2.5 kWh of GPU energy;
  workload "serve" owns GPU 0 of "a": 86 x 0.5 = 43 kWh; the team total is 43 + 2.5 = 45.5 kWh,
    so 2.5 kWh is in no workload.
"""

from __future__ import annotations

import datetime as dt
import io
from unittest import mock

import pytest

from greenops.windows import HOUR
from tests.support.factories import make_host

UTC = dt.UTC
NOW = dt.datetime(2026, 12, 4, 14, 5, tzinfo=UTC)
MONTH = dt.datetime(2026, 12, 1, tzinfo=UTC)
CURRENT = dt.datetime(2026, 12, 4, 14, tzinfo=UTC)


def _hours(gpu, hours, joules):
    from greenops.telemetry.models import GpuHour

    GpuHour.objects.bulk_create([
        GpuHour(gpu=gpu, bucket=h, samples=60, util_sum=3000.0, util_n=60, energy_j=joules,
                util_minutes=60, idle_minutes=0) for h in hours])


def test_running_month_rows_plus_not_attributed_equal_the_total(team):
    from pypdf import PdfReader

    from greenops.kpis import rollup
    from greenops.reports import csv_writer, generate
    from greenops.reports.models import Status, Trigger
    from greenops.reports.month_figures import Month
    from greenops.telemetry.models import Host
    from greenops.workloads.models import Workload

    a, _ = make_host(team, "a", gpus=2)
    gone, _ = make_host(team, "gone", gpus=1)
    Host.objects.filter(id__in=[a.id, gone.id]).update(created_at=MONTH - dt.timedelta(days=1))
    month_hours = [MONTH + i * HOUR for i in range(86)]
    _hours(a.gpus.get(index=0), [*month_hours, CURRENT], 1.8e6)
    _hours(gone.gpus.get(), [dt.datetime(2026, 12, 2, 8 + i, tzinfo=UTC) for i in range(10)],
           0.9e6)
    serve = Workload.objects.create(team=team, name="Serve", slug="serve", kind="inference")
    serve.gpus.add(a.gpus.get(index=0))
    rollup.rebuild(team, MONTH, CURRENT + HOUR)
    gone.delete()  # its measurements go with it; the team's rollups keep its energy

    with mock.patch("django.utils.timezone.now", return_value=NOW):
        report = generate.request(team, Month(2026, 12), Trigger.COMMAND, enqueue=False)
        report = generate.run(report.id, now=NOW)
    assert report.status == Status.DONE, report.error
    fig = report.figures
    assert fig["so_far"] and fig["end"] == CURRENT.isoformat()
    assert fig["totals"]["gpu_energy_kwh"] == pytest.approx(45.5)
    (row,) = fig["hosts"]
    assert row["gpu_energy_kwh"] == pytest.approx(43.0)
    assert fig["not_attributed"]["hosts"]["gpu_energy_kwh"] == pytest.approx(2.5)
    assert fig["not_attributed"]["workloads"]["energy_kwh"] == pytest.approx(2.5)

    back = csv_writer.read_totals(bytes(report.csv_data))
    for col in csv_writer.HOST_SUMMED:
        assert back["hosts_with_rest"][col] == pytest.approx(back["total"][col], abs=1e-6), col
    for col in csv_writer.WORKLOAD_SUMMED:
        assert back["workloads_with_rest"][col] == pytest.approx(back["total"][col],
                                                                 abs=1e-6), col
    # To the cent and the Wh, as printed.
    assert round(back["hosts_with_rest"]["cost_usd"], 2) == round(back["total"]["cost_usd"], 2)
    assert round(back["hosts_with_rest"]["it_kwh"] * 1000) == round(back["total"]["it_kwh"] * 1000)
    # Without the explicit row the hosts fall short by the deleted host's energy.
    assert back["hosts_sum"]["accelerator_kwh"] == pytest.approx(43.0)

    reader = PdfReader(io.BytesIO(bytes(report.pdf_data)))
    pdf = " ".join(" ".join(p.extract_text() for p in reader.pages).split())
    assert "Not attributed" in pdf and "= Total" in pdf
    assert "(so far)" in pdf
