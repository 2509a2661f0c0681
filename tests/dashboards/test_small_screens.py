"""Every page of the site, logged in as a team owner, at 1440 px and on a 390 px phone: it
answers 200 without a script or console error, the team home's headline cards hold numbers,
the page never scrolls sideways (scrollWidth <= innerWidth), and nothing visible
sits off-screen unless it is inside a box that scrolls or clips it on purpose (a wide table's
wrapper, the menu strip, a chart).

PAGES lists a path for every URL pattern that is a page; NOT_PAGES names every other pattern
with the reason it is not visited. A new URL pattern in neither fails
test_every_url_pattern_is_visited_or_named, so a new page cannot slip past this test.

A full-page screenshot of each visit lands in artifacts/screenshots/<width>/<name>.png (git
ignored; CI keeps the folder as an artifact; GREENOPS_SHOTS=DIR puts them elsewhere). One
browser, one context per width, one live server: about 40 s.
"""

from __future__ import annotations

import datetime as dt
import os
from pathlib import Path

import pytest
from django.urls import URLPattern, URLResolver
from django.utils import timezone
from playwright.sync_api import sync_playwright

from greenops import urls
from greenops.advisor.models import VariantPair
from greenops.alerts.models import Notification
from greenops.benchmarks.runs import store_run
from greenops.carbon.models import Site
from greenops.costs.overrides import PriceOverride
from greenops.kpis import job_accounting, rollup
from greenops.reports import generate
from greenops.reports.month_figures import Month
from greenops.teams import invitations
from greenops.teams.models import ApiToken
from greenops.workloads.models import TrainingJob, Workload
from tests.support.alerts import email_channel, make_rule
from tests.support.benchmarks import run_doc
from tests.support.browser import ARGS, CHROMIUM, log_in
from tests.support.factories import make_batch

SHOTS = Path(
    os.environ.get("GREENOPS_SHOTS")
    or Path(__file__).resolve().parents[2] / "artifacts" / "screenshots"
)
WIDTHS = (1440, 390)

# URL name -> path (filled in from the seeded objects). Query strings are extra visits.
PAGES = {
    "home": "/",
    "login": "/login/",  # visited logged out, first
    "carbon-methodology": "/methodology/",
    "team-create": "/new-team/",
    "invitation-accept": "/invitations/{invitation}/",
    "alert-email-confirm": "/alerts/confirm/{confirm}/",
    "team-dashboard": "/teams/{slug}/",
    "team-dashboard?range=hour": "/teams/{slug}/?range=hour",
    "team-dashboard?range=quarter": "/teams/{slug}/?range=quarter",
    "host-detail": "/teams/{slug}/hosts/{host}/",
    "host-edit": "/teams/{slug}/hosts/{host}/edit/",
    "host-list": "/teams/{slug}/hosts/",
    "host-add": "/teams/{slug}/hosts/add/",
    "kpi-overview": "/teams/{slug}/kpis/",
    "kpi-overview?range=hour": "/teams/{slug}/kpis/?range=hour",
    "kpi-workload": "/teams/{slug}/kpis/workloads/{workload}/",
    "kpi-job": "/teams/{slug}/kpis/jobs/{job}/",
    "costs-recommendations": "/teams/{slug}/costs/",
    "price-overrides": "/teams/{slug}/costs/prices/",
    "carbon-runs": "/teams/{slug}/carbon/runs/",
    "carbon-sites": "/teams/{slug}/carbon/sites/",
    "site-create": "/teams/{slug}/carbon/sites/new/",
    "site-edit": "/teams/{slug}/carbon/sites/{site}/edit/",
    "workload-list": "/teams/{slug}/workloads/",
    "pod-list": "/teams/{slug}/workloads/pods/",
    "workload-create": "/teams/{slug}/workloads/new/",
    "workload-edit": "/teams/{slug}/workloads/{workload}/edit/",
    "workload-gpus": "/teams/{slug}/workloads/{workload}/gpus/",
    "api-tokens": "/teams/{slug}/api-tokens/",
    "alert-list": "/teams/{slug}/alerts/",
    "alert-rule-new": "/teams/{slug}/alerts/new/",
    "alert-rule": "/teams/{slug}/alerts/{rule}/",
    "alert-rule-edit": "/teams/{slug}/alerts/{rule}/edit/",
    "alert-channels": "/teams/{slug}/alerts/channels/",
    "reports": "/teams/{slug}/reports/",
    "report-detail": "/teams/{slug}/reports/{report}/",
    "benchmark-overview": "/teams/{slug}/benchmarks/",
    "benchmark-history": "/teams/{slug}/benchmarks/{workload}/",
    "benchmark-run": "/teams/{slug}/benchmarks/runs/{run}/",
    "advisor-compare": "/teams/{slug}/advisor/compare/",
    "advisor-pairs": "/teams/{slug}/advisor/variants/",
    "advisor-pair": "/teams/{slug}/advisor/variants/{pair}/",
    "advisor-workload": "/teams/{slug}/advisor/workloads/{workload}/",
    "team-members": "/teams/{slug}/members/",
    "team-settings": "/teams/{slug}/settings/",
    "team-permissions": "/teams/{slug}/permissions/",
    "team-audit": "/teams/{slug}/audit/",
}
_POST = "a POST-only action (require_POST); its result page is one of PAGES"
NOT_PAGES = {
    "logout": _POST,
    "alert-rule-delete": _POST,
    "alert-rule-silence": _POST,
    "alert-channel-new": _POST,
    "alert-channel-test": _POST,
    "alert-channel-enable": _POST,
    "alert-channel-delete": _POST,
    "advisor-pair-new": _POST,
    "advisor-pair-delete": _POST,
    "benchmark-acknowledge": _POST,
    "carbon-upload": _POST,
    "price-override-add": _POST,
    "price-override-end": _POST,
    "reports-generate": _POST,
    "reports-subscribe": _POST,
    "member-role": _POST,
    "member-remove": _POST,
    "invitation-withdraw": _POST,
    "invitation-resend": _POST,
    "team-time-zone": _POST,
    "team-delete": _POST,
    "host-revoke": _POST,
    "host-rotate": _POST,
    "host-remove": _POST,
    "host-delete": _POST,
    "workload-gpu-add": _POST,
    "namespace-map": _POST,
    "namespace-unmap": _POST,
    "api-token-revoke": _POST,
    "alert-channel-test-status": "JSON polled by the channels page",
    "report-status": "JSON polled by the report page",
    "report-download": "a PDF or CSV file",
    "agent-unit": "a systemd unit file",
    "agent-wheel": "the agent's wheel file",
    "healthz": "a health check for load balancers (JSON)",
}
NOT_PAGE_PREFIXES = {
    "admin/": "Django's admin, styled by Django",
    "api/": "the JSON API (its docs page is Swagger's)",
}


def _named_patterns() -> list[str]:
    out: list[str] = []

    def walk(patterns, prefix: str) -> None:
        for p in patterns:
            route = prefix + str(p.pattern)
            if any(route.startswith(skip) for skip in NOT_PAGE_PREFIXES):
                continue
            if isinstance(p, URLResolver):
                walk(p.url_patterns, route)
            elif isinstance(p, URLPattern):
                assert p.name, f"{route} has no name: name it and list it here"
                out.append(p.name)

    walk(urls.urlpatterns, "")
    return out


def test_every_url_pattern_is_visited_or_named():
    names = set(_named_patterns())
    visited = {key.split("?")[0] for key in PAGES}
    missing = names - visited - set(NOT_PAGES)
    assert not missing, f"new URL patterns: add them to PAGES or NOT_PAGES: {sorted(missing)}"
    stale = (visited | set(NOT_PAGES)) - names
    assert not stale, f"listed but no longer a URL pattern: {sorted(stale)}"


def _seed(team, host_row, token, post_batch, users) -> dict:
    """One of each object a page names, with an hour of telemetry so figures and charts
    render: a workload with a training job that has data and one that has none."""
    now = timezone.now()
    last_hour = (now.timestamp() // 3600 - 1) * 3600  # the last finished hour
    assert (
        post_batch(token, make_batch(n_per_gpu=120, step=1.0, start=last_hour + 600)).status_code
        == 202
    )
    rollup.rebuild(team, now - dt.timedelta(hours=2), now + dt.timedelta(hours=1))
    workload = Workload.objects.create(
        team=team, name="Image Ranker", slug="ranker", kind="inference"
    )
    start = dt.datetime.fromtimestamp(last_hour, dt.UTC)
    job = TrainingJob.objects.create(
        team=team,
        workload=workload,
        name="fine-tune resnet-50",
        started_at=start,
        stopped_at=start + dt.timedelta(hours=1),
    )
    job.gpus.set(host_row.gpus.all())
    dark = TrainingJob.objects.create(
        team=team,
        workload=workload,
        name="warm-up run (no agent)",
        started_at=start - dt.timedelta(days=3),
        stopped_at=start - dt.timedelta(days=3, hours=-2),
    )
    dark.gpus.set(host_row.gpus.all())
    run, _ = store_run(team, run_doc(regress_pct=20.0))
    override = PriceOverride.objects.create(
        team=team, kind="discount", discount_pct=5, source="EDP contract 2026"
    )
    site = Site.objects.create(team=team, name="Main DC", pue=1.4)
    pair = VariantPair.objects.create(
        team=team,
        label="fp16 vs int8",
        a_workload=workload,
        b_workload=workload,
        a_start=start,
        a_end=start + dt.timedelta(hours=1),
    )
    channel = email_channel(team)
    rule = make_rule(team, channels=[channel], name="Idle GPUs")
    Notification.objects.create(channel=channel, kind="test", dedupe_key="test:shots")
    ApiToken.issue(team, "ci deploy")
    invitation, _ = invitations.invite(team, users["member"], "owner@example.com", "viewer")
    link_token = invitations.new_token(invitations.INVITATION_PREFIX)  # the mailed secret
    type(invitation).objects.filter(id=invitation.id).update(
        token_hash=invitations.hash_token(link_token)
    )
    report = generate.run(generate.request(team, Month(start.year, start.month), enqueue=False).id)
    job_accounting.account(job)
    job_accounting.account(dark)  # no telemetry while it ran: unknown, not 0.0 GPU-hours
    return {
        "slug": team.slug,
        "host": host_row.id,
        "workload": workload.slug,
        "job": job.id,
        "run": run.id,
        "override": override.id,
        "site": site.id,
        "pair": pair.id,
        "rule": rule.id,
        "report": report.id,
        "confirm": "tok-oncall@example.com",
        "invitation": link_token,
    }


# Elements right of the viewport (or left of 0) that no scrolling or clipping box contains.
OFF_SCREEN_JS = """() => {
  const w = window.innerWidth, out = [];
  const clipped = (el) => {
    for (let a = el.parentElement; a && a !== document.body; a = a.parentElement) {
      const o = getComputedStyle(a).overflowX;
      if (o !== "visible") return true;
    }
    return false;
  };
  for (const el of document.body.querySelectorAll("*")) {
    const r = el.getBoundingClientRect();
    if (!r.width || !r.height || el.closest("#js-plotly-tester")) continue;  // Plotly's probe
    if ((r.right > w + 1 || r.left < -1) && !clipped(el)) {
      out.push(el.tagName.toLowerCase() + (el.id ? "#" + el.id : "")
               + (el.className && typeof el.className === "string" ? "." + el.className : "")
               + " right=" + Math.round(r.right));
      if (out.length > 5) break;
    }
  }
  return out;
}"""


@pytest.mark.browser
@pytest.mark.django_db(transaction=True)
def test_every_page_fits_a_phone_and_a_desktop(
    live_server, users, team, host, post_batch, monkeypatch
):
    monkeypatch.setenv("DJANGO_ALLOW_ASYNC_UNSAFE", "true")  # ORM calls beside Playwright's loop

    ids = _seed(team, *host, post_batch, users)
    problems: list[str] = []
    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path=CHROMIUM, args=ARGS)
        try:
            for width in WIDTHS:
                context = browser.new_context(viewport={"width": width, "height": 844})
                page = context.new_page()
                page.set_default_timeout(20_000)
                page.on("pageerror", lambda e, pg=page: problems.append(f"{pg.url}: {e}"))
                page.on("console", lambda m, pg=page: problems.append(
                    f"{pg.url}: console {m.text}") if m.type == "error" else None)
                (SHOTS / str(width)).mkdir(parents=True, exist_ok=True)
                order = ["login"] + [k for k in PAGES if k != "login"]
                for name in order:
                    url = live_server.url + PAGES[name].format(**ids)
                    response = page.goto(url)
                    if name == "login":
                        page.screenshot(path=SHOTS / str(width) / "login.png", full_page=True)
                        log_in(page, live_server.url, "owner", "pw-owner")
                        continue
                    if response.status != 200:
                        problems.append(f"{name} at {width}: HTTP {response.status}")
                        continue
                    if page.locator("[data-figure]").count():
                        page.locator("[data-figure][data-rendered='true']").first.wait_for()
                    sideways = page.evaluate(
                        "document.documentElement.scrollWidth - window.innerWidth"
                    )
                    if sideways > 0:
                        problems.append(f"{name} at {width}: scrolls sideways by {sideways} px")
                    off = page.evaluate(OFF_SCREEN_JS)
                    if off:
                        problems.append(f"{name} at {width}: off-screen {off}")
                    page.screenshot(
                        path=SHOTS / str(width) / f"{name.replace('?', '_')}.png", full_page=True
                    )
                # The home leads with its headline figures: by now (every page visited, the
                # first view's refresh done) each of these cards holds a number.
                page.goto(live_server.url + PAGES["team-dashboard"].format(**ids))
                for key in ("cost_usd", "energy_kwh", "co2e_kg", "gpu_util_pct"):
                    text = page.locator(f"[data-kpi='{key}']").first.inner_text()
                    if not any(ch.isdigit() for ch in text):
                        problems.append(f"team-dashboard at {width}: card {key} reads {text!r}")
                context.close()
        finally:
            browser.close()
    assert not problems, "\n".join(problems)
