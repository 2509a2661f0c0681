"""A member opens a workload's benchmark history in Chromium, follows a failed run to its page,
and acknowledges the regression with a reason; the history then marks it.

Set GREENOPS_SHOTS=DIR to also save screenshots of the pages at 1440 and 390 px wide.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from greenops.benchmarks.models import Acknowledgement, BenchmarkRun
from greenops.benchmarks.runs import store_run
from greenops.workloads.models import Workload
from tests.support.benchmarks import run_doc
from tests.support.browser import log_in

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]


def _shot(pg, name: str) -> None:
    directory = os.environ.get("GREENOPS_SHOTS")
    if not directory:
        return
    for width in (1440, 390):
        pg.set_viewport_size({"width": width, "height": 900})
        pg.wait_for_timeout(300)  # Plotly relayouts on resize
        pg.screenshot(path=str(Path(directory) / f"gate-{name}-{width}.png"), full_page=True)
    pg.set_viewport_size({"width": 1280, "height": 900})


def test_history_run_page_and_acknowledging_a_regression(live_server, page, users, team):  # noqa: F811
    Workload.objects.create(team=team, name="Image Ranker", slug="ranker", kind="inference")
    # main: six runs near the baseline, then a commit that makes every run ~18 % hungrier.
    for i, pct in enumerate((0.0, 1.0, -0.5, 0.5, -1.0, 0.2, 18.0, 18.8, 17.5, 18.3, 17.9)):
        store_run(team, run_doc(branch="main", commit=f"{i:02d}b2c3d4", regress_pct=pct))
    store_run(team, run_doc(branch="bigger-model", commit="d4e5f6a7", regress_pct=20.0))
    store_run(team, run_doc(branch="main", commit="e5f6a7b8", source="simulated"))
    failed = BenchmarkRun.objects.get(commit="d4e5f6a7")

    log_in(page, live_server.url, "member", "pw-member")
    page.goto(f"{live_server.url}/teams/{team.slug}/")
    page.get_by_role("navigation", name="Team sections").get_by_role(
        "link", name="Benchmarks").click()
    page.locator("#benchmarked-workloads").wait_for()
    _shot(page, "overview")
    page.get_by_role("link", name="Image Ranker").click()
    page.locator("#chart-fig-energy_per_inference_j .main-svg").first.wait_for()
    assert page.get_by_role("note").filter(has_text="Includes simulated runs").is_visible()
    steps = page.locator("#change-points li")
    assert steps.count() == 1
    assert "Stepped up" in steps.inner_text() and "06b2c3d4" in steps.inner_text()
    _shot(page, "history")

    page.get_by_role("link", name="d4e5f6a7").click()
    row = page.locator("#comparison tr[data-kpi='energy_per_inference_j']")
    assert "+20.0 %" in row.inner_text() and "fail" in row.inner_text()
    _shot(page, "run-failed")
    page.get_by_label("Why is this regression accepted?").fill(
        "Larger model: +2 points of recall, agreed in review")
    page.get_by_role("button", name="Acknowledge").click()
    page.get_by_text("Larger model: +2 points of recall").first.wait_for()
    ack = Acknowledgement.objects.get()
    assert (ack.run, ack.kpi, ack.user) == (failed, "energy_per_inference_j", users["member"])
    _shot(page, "run-acknowledged")

    page.goto(f"{live_server.url}/teams/{team.slug}/benchmarks/ranker/")
    page.locator("#chart-fig-energy_per_inference_j .main-svg").first.wait_for()
    assert page.locator("#runs").get_by_text("acknowledged").count() == 1
    _shot(page, "history-acknowledged")
