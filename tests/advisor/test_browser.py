"""A member walks from a workload's KPI page to its efficiency diagnosis in Chromium, then
compares two periods of the workload (fp16, then int8) as variants.

Set GREENOPS_SHOTS=DIR to also save screenshots of the pages at 1440 and 390 px wide.
"""

from __future__ import annotations

import datetime as dt
import os
import time
from pathlib import Path

import pytest

from greenops.telemetry import store, wire
from greenops.telemetry.ingest import known_gpus
from greenops.workloads.models import Workload
from tests.support.advisor import FP16_J, INT8_J, T0, hours, profile_batch
from tests.support.browser import log_in
from tests.support.factories import make_host

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]


def _shot(pg, name: str) -> None:
    directory = os.environ.get("GREENOPS_SHOTS")
    if not directory:
        return
    for width in (1440, 390):
        pg.set_viewport_size({"width": width, "height": 900})
        pg.wait_for_timeout(200)
        pg.screenshot(path=str(Path(directory) / f"advisor-{name}-{width}.png"), full_page=True)
    pg.set_viewport_size({"width": 1280, "height": 900})


def test_diagnosis_then_variant_comparison(live_server, page, users, team):  # noqa: F811
    host, _ = make_host(team, name="inference-1", gpus=4)
    wl = Workload.objects.create(team=team, name="Chat", slug="chat", kind="inference")
    wl.hosts.add(host)
    # Under-utilised (20 %) GPUs that report no memory utilisation, at the power cap half the
    # time: the page must diagnose the first, skip the second and show the third.
    doc = profile_batch(util=20.0, mem_util=None, throttle=0x4)
    batch = wire.parse_batch(doc, now_s=time.time(), max_samples=10**6, max_future_s=300,
                             max_age_s=86400)
    store.store_batch(batch, known_gpus(host))
    hours(team, wl, T0, FP16_J)
    hours(team, wl, T0 + dt.timedelta(hours=10), INT8_J)

    log_in(page, live_server.url, "member", "pw-member")
    page.goto(f"{live_server.url}/teams/{team.slug}/kpis/workloads/chat/")
    page.get_by_role("link", name="Efficiency advisor").click()
    under = page.locator("#diagnosis-under_utilised")
    under.wait_for()
    assert "serve the measured load on 2 of 4 GPUs" in under.inner_text()
    assert "kWh" in under.locator(".effect").inner_text()
    capped = page.locator("#diagnosis-power_capped")
    assert capped.is_visible()
    # One cap measured: the published curve, labelled so, with its source.
    assert "published-curve estimate" in capped.locator(".effect").first.inner_text()
    assert "arXiv 2205.09646" in capped.inner_text()
    assert page.locator("#diagnosis-memory_bound").count() == 0
    assert "memory utilisation reported by 0 % of samples" in page.locator("#skipped").inner_text()
    # 4 A100s 20 % busy: a different GPU from the published table, priced from the catalog,
    # each considered GPU linking its datasheet.
    other = page.locator("#diagnosis-smaller_gpu")
    assert other.is_visible() and "estimate" in other.locator(".effect").first.inner_text()
    assert other.locator("#alternatives a[href^='https://']").count() >= 3
    _shot(page, "diagnosis")

    page.get_by_role("link", name="Compare variants").click()
    page.locator("#variant-form").wait_for()
    page.locator("#id_a_start").fill("2026-11-20T00:00")
    page.locator("#id_a_end").fill("2026-11-20T06:00")
    page.locator("#id_b_start").fill("2026-11-20T10:00")
    page.locator("#id_b_end").fill("2026-11-20T16:00")
    page.get_by_role("button", name="Compare").click()
    row = page.locator("#line-energy_per_inference_j")
    row.wait_for()
    text = row.inner_text()
    assert "400" in text and "250" in text and "-37.5 %" in text and "beyond noise" in text
    assert "unknown" in page.locator("#line-latency_p99_ms").inner_text()
    _shot(page, "compare")

    # Keep the comparison as a marked pair, find it under Variants, open it, delete it.
    page.locator("#id_pair_label").fill("fp16 vs int8")
    page.get_by_role("button", name="Mark as variants").click()
    page.locator("#line-energy_per_inference_j").wait_for()
    assert page.locator("h1").inner_text().startswith("fp16 vs int8")
    assert "-37.5 %" in page.locator("#line-energy_per_inference_j").inner_text()
    _shot(page, "pair")
    page.get_by_role("link", name="Advisor", exact=True).click()
    row = page.locator("#pairs tbody tr")
    row.first.wait_for()
    assert row.count() == 1 and "fp16 vs int8" in row.first.inner_text()
    assert "2026-11-20 10:00" in row.first.inner_text()
    _shot(page, "pairs")
    page.once("dialog", lambda dialog: dialog.accept())  # the delete asks first
    row.first.get_by_role("button", name="Delete pair fp16 vs int8").click()
    page.locator("#no-pairs").wait_for()
