"""A member generates October's report in Chromium, watches its status go from pending to
done, and downloads both files; the pages are screenshotted at desktop and phone widths."""

from __future__ import annotations

import io
import os
from pathlib import Path

import pytest

from greenops.reports import csv_writer, generate, tasks
from greenops.reports.models import Report
from tests.support.browser import log_in

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]

SHOTS = Path(os.environ.get("GREENOPS_SHOTS", ""))  # set to keep screenshots


def shot(page, name: str) -> None:  # noqa: F811
    if not SHOTS.parts:
        return
    for width, label in ((1440, "desktop"), (390, "phone")):
        page.set_viewport_size({"width": width, "height": 900})
        page.screenshot(path=str(SHOTS / f"reports-{name}-{label}.png"), full_page=True)
    page.set_viewport_size({"width": 1280, "height": 900})


def test_generate_watch_and_download(live_server, page, users, team, october,  # noqa: F811
                                     monkeypatch):
    queued: list[int] = []
    # No worker here: hold the task, so the page shows "pending" until the test runs it.
    monkeypatch.setattr(tasks.generate_report, "delay", queued.append)
    log_in(page, live_server.url, "member", "pw-member")
    page.goto(f"{live_server.url}/teams/{team.slug}/")
    page.get_by_role("navigation", name="Team sections").get_by_role(
        "link", name="Reports").click()
    page.get_by_role("heading", name="Vision: monthly reports").wait_for()
    page.get_by_label("Month").select_option("2026-10")
    page.get_by_role("button", name="Generate report").click()
    job = page.locator(".job").first
    job.locator("[data-field=status]", has_text="pending").wait_for()
    (report_id,) = queued
    generate.run(report_id)  # what the worker does
    job.locator("[data-field=status]", has_text="done").wait_for()
    page.locator("#reports .status.done").first.wait_for()  # the page reloads its table
    job = page.locator(".job").first
    assert job.locator("progress").get_attribute("value") == "100"
    shot(page, "list")

    with page.expect_download() as pdf_dl:
        job.get_by_role("link", name="PDF").click()
    pdf = Path(pdf_dl.value.path()).read_bytes()
    assert pdf.startswith(b"%PDF") and pdf_dl.value.suggested_filename.endswith("-r1.pdf")
    with page.expect_download() as csv_dl:
        job.get_by_role("link", name="CSV").click()
    data = Path(csv_dl.value.path()).read_bytes()
    assert csv_writer.read_totals(data)["total"]["it_kwh"] == pytest.approx(0.6)
    assert data == bytes(Report.objects.get(id=report_id).csv_data)

    job.get_by_role("link", name="View").click()
    page.get_by_role("heading", name="Vision: October 2026").wait_for()
    assert "0.600 kWh" in page.locator("#section-summary").inner_text()
    shot(page, "detail")
    if SHOTS.parts:
        import pypdfium2

        doc = pypdfium2.PdfDocument(io.BytesIO(pdf))
        for i in range(len(doc)):
            doc[i].render(scale=1.6).to_pil().save(SHOTS / f"reports-pdf-page{i + 1}.png")
