"""The demo tells a true story: real instance types with their real boards, both teams priced,
non-trivial cost, idle cost and recommendations, a plausible energy per inference; and stopping
it stops the simulated agents it started."""

from __future__ import annotations

import datetime as dt
import os
import signal
import socket
import sqlite3
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import pytest

from greenops.demo.story import HOSTS
from tests.support import ROOT
from tests.support.embedded import DB_FILE, embedded_env

DAYS = 2.2  # enough for the two-day cost window below
FLEET_DAYS = 1.2  # the inference fleet: a day to compare per-inference figures

# The seeded tests share one seeding, so they stay on one xdist worker (--dist loadgroup).
seeded_group = pytest.mark.xdist_group("demo-seed")


@pytest.fixture(scope="module")
def seeded(django_db_setup, django_db_blocker):
    """The demo seeded once for this module's tests (it took ~15 s a test, one seeding each),
    inside a transaction rolled back after them. Each test's own transaction (the `db` fixture)
    is a savepoint within it, so what one test changes is undone before the next, as before."""
    from django.db import transaction

    from greenops.demo import seed

    with django_db_blocker.unblock():
        outer = transaction.atomic()
        outer.__enter__()
        try:
            yield seed.seed(DAYS, fleet_days=FLEET_DAYS)
        finally:
            transaction.set_rollback(True)
            outer.__exit__(None, None, None)


@pytest.fixture
def demo(seeded, db):
    return seeded


@seeded_group
def test_demo_hosts_are_real_instance_types_with_their_boards(demo):
    from greenops.costs.models import InstanceType
    from greenops.telemetry.models import Host

    for host in Host.objects.filter(team__slug__in=["ml-platform", "research"]):
        itype = InstanceType.objects.get(provider="aws", name=host.instance_type)
        gpus = list(host.gpus.all())
        # AWS: p5.48xlarge = 8 x H100 80GB at 700 W; g6e.12xlarge = 4 x L40S, g6e.xlarge = 1 x
        # L40S at 350 W. The simulated boards say the same.
        assert len(gpus) == itype.gpu_count, host.name
        family = "H100" if "H100" in itype.gpu_model else "L40S"
        assert all(family in g.name and "Simulated" in g.name for g in gpus), host.name
        assert {g.power_limit_w for g in gpus} == {700.0 if family == "H100" else 350.0}
    ml = Host.objects.filter(team__slug="ml-platform")
    assert ml.filter(instance_type="p5.48xlarge").count() == 1
    assert ml.filter(instance_type="g6e.12xlarge").count() == 1


@seeded_group
def test_demo_fleet_is_priced_with_idle_cost_and_recommendations(demo):
    from greenops.costs import accounting
    from greenops.costs.team_recommendations import team_recommendations

    ml, research = demo.teams["ml-platform"], demo.teams["research"]
    costs = accounting.team_costs(accounting.collect(ml, 2))
    assert costs["problems"] == [] and costs["total_cost_usd"] is not None
    # Two days of both hosts, on-demand in us-east-1 from the bundled catalog: the p5 at
    # $55.04/h and the g6e.12xlarge at $10.49264/h for the 48 hours they ran:
    # 48 x (55.04 + 10.49264) = $3,145.57.
    assert costs["total_cost_usd"] == pytest.approx(48 * (55.04 + 10.49264))
    assert costs["idle_cost_usd"] > 0  # the trainer's idle blocks

    def kinds(team) -> set[str]:
        return {
            r["kind"]
            for r in team_recommendations(team, 30)["recommendations"]
            if r["monthly_usd_saved"] > 0
        }

    assert "spot" in kinds(ml)  # checkpointed fine-tuning on on-demand H100s
    assert "stop_idle" in kinds(research)  # the box left idle four days ago


@seeded_group
def test_demo_fleet_advice_compares_accelerators_and_advises_replicas(demo, client):
    """The inference fleet's advice shows figures, not unknown: the same model on H100, MI300X,
    Inferentia2 and a Jetson compared per inference, the cheapest (the MI300X bought outright)
    not the greenest (the H100s on Oregon's grid, 166 g/kWh against Virginia's 245), and the
    H100 service's replicas sized from the hours its p99 met the 4 s target."""
    from django.contrib.auth.models import User

    client.force_login(User.objects.get(username="demo"))
    url = "/api/v1/teams/inference/workloads/{}/fleet-advice"
    data = client.get(url.format("llama-8b-h100"), {"range": "week"}).json()
    acc = data["accelerators"]
    assert acc["model"] == "llama-3.1-8b-instruct" and not acc.get("unknown"), acc
    assert {r["workload"] for r in acc["rows"] if r["compared"]} == {
        "llama-8b-h100",
        "llama-8b-mi300x",
        "llama-8b-inf2",
        "llama-8b-orin-edge",
    }
    for row in acc["rows"]:
        assert row["usd_per_1k_inferences"] > 0 and row["co2e_g_per_1k_inferences"] > 0, row
    assert (acc["cheapest"], acc["greenest"]) == ("llama-8b-mi300x", "llama-8b-h100")
    assert any(m["usd_saved_per_month"] for m in acc["moves"])
    rep = data["replicas"]
    assert rep is not None and rep["unknown"] is None, rep
    assert rep["replicas_now"] == 8 and rep["needed"] >= 1
    assert rep["capacity_per_replica_per_s"] > 0
    assert True in [h["meets_target"] for h in rep["hours"]]
    assert False in [h["meets_target"] for h in rep["hours"]]


@seeded_group
def test_a_team_home_shows_its_cost_on_the_first_view_after_the_demo_starts(demo):
    """The demo views each team home once before it serves (warm_team_homes): a newcomer's
    first view finds the cost figures computed, where without it the page says "being
    computed" (the figures are never computed inside a page's request)."""
    import re

    from django.contrib.auth.models import User
    from django.core.cache import cache
    from django.test import Client

    from greenops.demo.management.commands.demo import warm_team_homes

    def first_view(slug: str) -> tuple[str, str]:
        """(the cost card's text, the page)"""
        client = Client()
        client.force_login(User.objects.get(username="demo"))
        html = client.get(f"/teams/{slug}/").content.decode()
        return re.search(r'data-kpi="cost_usd">([^<]*)<', html).group(1), html

    cache.clear()  # a fresh start: the demo's cache is the process's memory
    cost, html = first_view("research")
    assert cost == "unknown" and "being computed" in html
    cache.clear()
    warm_team_homes(demo)
    for team in demo.teams.values():
        cost, html = first_view(team.slug)
        assert re.fullmatch(r"≥? ?\$[\d,]+\.\d\d", cost), (team.slug, cost)
        assert "being computed" not in html, team.slug


@seeded_group
def test_demo_energy_per_inference_is_plausible_for_an_8b_model(demo):
    from greenops.kpis import queries
    from greenops.workloads.models import Workload

    chat = Workload.objects.get(team=demo.teams["ml-platform"], slug="chat-llm")
    k = queries.overview(demo.teams["ml-platform"], chat, "day")["current"]
    # 4 L40S at up to 350 W serving ~12 replies/s each at full load, 180 tokens per reply:
    # 290 W / 12 /s = 24 J per reply when busy, more when idle power is shared by fewer
    # replies. Published 8B-model figures on this class of GPU are 0.1-0.5 J per token.
    assert 15 < k["energy_per_inference_j"] < 80
    assert 0.08 < k["energy_per_token_j"] < 0.5
    assert k["simulated"]


@seeded_group
def test_demo_seed_is_idempotent(demo):
    from greenops.demo import seed
    from greenops.telemetry.models import GpuSample

    before = GpuSample.objects.count()
    again = seed.seed(DAYS, fleet_days=FLEET_DAYS)
    assert not again.backfilled and GpuSample.objects.count() == before
    assert again.idle_since == demo.idle_since  # the research box tells the same story


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _children(pid: int) -> set[int]:
    out: set[int] = set()
    for task in Path(f"/proc/{pid}/task").iterdir():
        text = (task / "children").read_text().split()
        out.update(int(p) for p in text)
    return out


@pytest.mark.skipif(not Path("/proc/self/task").exists(), reason="needs Linux /proc")
def test_live_agents_continue_the_history_and_flush_their_last_batch_on_sigterm(
    tmp_path, sqlite_migrated
):
    """A fresh `manage.py demo`: the live agents' first minute follows the newest seeded minute
    (no hole in the live chart), and SIGTERM stops the agents while the server still answers,
    so each sends its last batch: the spools are empty and every GPU has a sample from the
    last seconds before the stop."""
    port = _free_port()
    env = embedded_env(tmp_path, sqlite_migrated)
    proc = subprocess.Popen(
        [sys.executable, "manage.py", "demo", "--days", "0.05", "--port", str(port)],
        cwd=ROOT,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    db = sqlite3.connect(tmp_path / DB_FILE, timeout=30)
    live = "SELECT count(DISTINCT s.gpu_id) FROM telemetry_gpusample s WHERE s.ts >= ?"
    try:
        deadline = time.monotonic() + 300
        agents: set[int] = set()
        while time.monotonic() < deadline and len(agents) < 3:
            try:
                urllib.request.urlopen(f"http://127.0.0.1:{port}/healthz", timeout=2)
                agents = {
                    p
                    for p in _children(proc.pid)
                    if b"greenops.demo.agent" in Path(f"/proc/{p}/cmdline").read_bytes()
                }
            except OSError:
                pass
            time.sleep(0.5)
        assert len(agents) == 3, "the demo should run one live agent per demo host"
        started = time.time()
        # 13 live GPUs (8 + 4 + 1); wait for every one's first live batch (10 s of samples).
        while time.monotonic() < deadline:
            if db.execute(live, [_sqlite_ts(started)]).fetchone()[0] == 13:
                break
            time.sleep(1)
        time.sleep(3)  # some samples in the agents' open batches, not yet sent
        stopped_at = time.time()
        proc.send_signal(signal.SIGTERM)
        out, _ = proc.communicate(timeout=60)
        assert proc.returncode == 0, out
        assert "Demo stopped" in out
        for pid in agents:  # reaped by the demo: no process left with that id
            assert (
                not Path(f"/proc/{pid}").exists()
                or b"greenops.demo.agent" not in Path(f"/proc/{pid}/cmdline").read_bytes()
            )
    finally:
        if proc.poll() is None:
            os.kill(proc.pid, signal.SIGKILL)
            proc.wait()
    # Flushed: nothing left in any spool, and each GPU's newest sample is from the last two
    # seconds before SIGTERM (one sample a second; the batch sealed every 10 s would leave up to
    # 10 s unsent).
    for spool in tmp_path.glob("demo-agent-*.db"):
        with sqlite3.connect(spool) as s:  # the demo's output holds the agents' warnings
            assert s.execute("SELECT count(*) FROM batches").fetchone()[0] == 0, (spool.name, out)
            assert s.execute("SELECT count(*) FROM journal").fetchone()[0] == 0, (spool.name, out)
    # The live hosts' GPUs (the inference fleet has history only).
    live_gpus = (
        "SELECT g.id FROM telemetry_gpu g JOIN telemetry_host h ON h.id = g.host_id "
        f"WHERE h.name IN ({', '.join(repr(h.name) for h in HOSTS)})"
    )
    newest = db.execute(
        "SELECT min(t) FROM (SELECT max(ts) AS t FROM telemetry_gpusample "
        f"WHERE gpu_id IN ({live_gpus}) GROUP BY gpu_id)"
    ).fetchone()[0]
    assert newest >= _sqlite_ts(stopped_at - 2), (newest, _sqlite_ts(stopped_at))
    # No hole: every GPU has a minute rollup for every minute from its first to its last.
    rows = db.execute(
        "SELECT gpu_id, count(*), min(bucket), max(bucket) FROM telemetry_gpuminute "
        f"WHERE gpu_id IN ({live_gpus}) GROUP BY gpu_id"
    ).fetchall()
    assert len(rows) == 13
    for gpu_id, n, first, last in rows:
        minutes = (_parse(last) - _parse(first)) // 60 + 1
        assert n == minutes, f"GPU {gpu_id}: {minutes - n} minute(s) missing"
    db.close()


def _sqlite_ts(t: float) -> str:
    return dt.datetime.fromtimestamp(t, dt.UTC).strftime("%Y-%m-%d %H:%M:%S")


def _parse(text: str) -> int:
    return int(dt.datetime.fromisoformat(text).replace(tzinfo=dt.UTC).timestamp())
