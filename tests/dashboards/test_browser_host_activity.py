"""The host page in Chromium: who runs on each GPU (NVML processes, dcgm-exporter pods), the
GPUs' max clocks and the host's CPU/network/disk over the last 24 h, at desktop and phone
widths (screenshots in /work/notes/shots when that folder exists)."""

from __future__ import annotations

import time
from pathlib import Path

import pytest

from greenops.telemetry import host_samples
from greenops.telemetry.models import Gpu
from tests.support.browser import log_in
from tests.support.factories import make_host
from tests.support.host_activity import host_doc

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]
SHOTS = Path("/work/notes/shots")


def test_host_page_shows_processes_clocks_and_activity(live_server, page, users, team):  # noqa: F811
    host, _ = make_host(team)
    Gpu.objects.filter(host=host).update(max_sm_clock_mhz=1410.0, max_mem_clock_mhz=1215.0)
    host_samples.accept(host, host_doc(time.time() - 3 * 3600 + 60))
    log_in(page, live_server.url, "owner", "pw-owner")
    for width in (1440, 390):
        page.set_viewport_size({"width": width, "height": 900})
        page.goto(f"{live_server.url}/teams/{team.slug}/hosts/{host.id}/")
        gpus = page.locator("#gpus")
        assert "pod inference/vllm-0 (vllm)" in gpus.inner_text()
        assert "python3 4242 · 2,048 MiB" in gpus.inner_text()
        assert "SM 1,410 · mem 1,215 MHz" in gpus.inner_text()
        activity = page.locator("#host-activity").inner_text()
        assert "40.0 % of all CPUs on average" in activity and "6.67 MB/s in" in activity
        if SHOTS.is_dir():
            page.screenshot(path=str(SHOTS / f"host-activity-{width}.png"), full_page=True)
