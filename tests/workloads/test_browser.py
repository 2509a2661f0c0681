"""An admin registers a workload and an API token in Chromium; an application then reports
inference counts with that token and the workload's KPIs show them."""

from __future__ import annotations

import time

import pytest

from collectors.client import GreenOpsClient
from greenops.kpis import rollup
from greenops.kpis.measure import Factors, HourlyPrice, SiteFactors
from greenops.kpis.models import InferenceWindow
from tests.support.browser import log_in

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]


def test_register_workload_and_token_then_report_inferences(live_server, page, users, team,  # noqa: F811
                                                          host):
    log_in(page, live_server.url, "owner", "pw-owner")
    page.goto(f"{live_server.url}/teams/{team.slug}/workloads/")
    page.get_by_role("link", name="Register a workload").first.click()
    # "Name:" exactly: the matching rules' labels ("Match process name", ...) also hold "name"
    page.get_by_role("textbox", name="Name:", exact=True).fill("Chat LLM")
    page.get_by_label("Kind").select_option("inference")
    page.get_by_role("checkbox", name="gpu-node-1", exact=True).check()  # the whole host
    page.get_by_role("button", name="Save").click()
    page.get_by_role("cell", name="Chat LLM").wait_for()

    page.goto(f"{live_server.url}/teams/{team.slug}/api-tokens/")
    page.get_by_label("Name").fill("chat service")
    # A new token reads by default (least privilege); the service sends inferences: ingest.
    page.get_by_label("Scope").select_option("ingest")
    page.get_by_role("button", name="Create token").click()
    token = page.locator("#new-token").inner_text()
    assert token.startswith("gha_")

    client = GreenOpsClient(live_server.url, token)
    # Counted in the last finished hour: figures count whole finished hours (windows.period).
    end = (time.time() // 3600) * 3600 - 1800
    client.record_inferences("chat-llm", 300, latencies_ms=[40.0] * 297 + [900.0] * 3, end=end)
    assert InferenceWindow.objects.get().requests == 300
    factors = Factors(site_factors=lambda h, hour: SiteFactors(1.2, "test", 300.0, "test"),
                      price=lambda h, hour: HourlyPrice(4.0, "on_demand", "test", None, False))
    rollup.run(factors=factors)

    page.goto(f"{live_server.url}/teams/{team.slug}/kpis/workloads/chat-llm/?range=day")
    assert page.locator("[data-kpi='requests']").inner_text() == "300"
