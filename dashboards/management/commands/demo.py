"""`manage.py demo`: set up the embedded default and run GreenOps with simulated data.

Creates a demo login and team, backfills a week of simulated history through the same
validation and storage code as real batches, then starts the web server and a simulated agent
that feeds live data over HTTP. Every demo sample is marked simulated, and pages badge it.
"""

from __future__ import annotations

import datetime as dt
import math
import os
import signal
import subprocess
import sys
import threading
import time
import uuid
from pathlib import Path

from django.conf import settings
from django.contrib.auth.models import User
from django.core.management import call_command
from django.core.management.base import BaseCommand
from django.db import transaction

from collectors.batch import SampleBuffer, build_batch
from collectors.energy import EnergyAccountant
from collectors.simulated import SimulatedSource
from greenops import embedded_beat
from greenops.kpis import inference, jobs, rollup
from greenops.teams.models import Membership, Role, Team
from greenops.telemetry import store, wire
from greenops.telemetry.ingest import known_gpus, register_inventory
from greenops.telemetry.models import Gpu, GpuSample, Host
from greenops.workloads.models import Workload, WorkloadKind

DEMO_USER = "demo"
DEMO_PASSWORD = "greenops-demo"
LIVE_HOST, LIVE_GPUS = "sim-trainer-01", 4
HISTORY_HOST, HISTORY_GPUS = "sim-inference-01", 2


def backfill(host: Host, n_gpus: int, days: float, step_s: float, seed: int) -> int:
    """Simulated history, one sample per GPU every step_s seconds, stored like real batches."""
    now = time.time()
    t = [now - days * 86400]
    source = SimulatedSource(n_gpus, seed=seed, clock=lambda: t[0])
    register_inventory(host, {"gpus": [g.__dict__ for g in source.gpus()], "hostname": host.name})
    gpu_ids = known_gpus(host)
    energy = EnergyAccountant(max_gap_s=5 * step_s)
    stored = 0
    buf = SampleBuffer()
    while t[0] < now - 120:
        for i in range(n_gpus):
            reading = source.read(i)
            joules, method = energy.update(i, t[0], reading.energy_mj, reading.power_w)
            buf.append(t[0], i, reading, joules, method)
        t[0] += step_s
        if len(buf) >= 20_000 or t[0] >= now - 120:
            doc = build_batch(buf.columns(), "simulated")
            batch = wire.parse_batch(doc, now_s=now, max_samples=1 << 30, max_future_s=300,
                                     max_age_s=days * 86400 + 3600)
            stored += store.store_batch(batch, gpu_ids)
            buf.clear()
    # History is not a live agent: the host was last heard from at its last backfilled sample.
    Host.objects.filter(id=host.id).update(
        last_seen=dt.datetime.fromtimestamp(t[0] - step_s, dt.UTC), agent_version=""
    )
    return stored


LATENCY_LE_MS = [10, 25, 50, 100, 250, 500, 1000, 2500, 5000]


def _lognormal_cdf(x: float, median: float, sigma: float) -> float:
    return 0.5 * (1 + math.erf(math.log(x / median) / (sigma * math.sqrt(2))))


def simulated_windows(slug: str, source: SimulatedSource, start: float, end: float,
                      step_s: float) -> list[dict]:
    """Inference counts that follow the simulated GPU's load, with a log-normal latency
    histogram whose median rises with load. Demo data only: sent as from 'demo (simulated)'."""
    windows, t = [], start
    while t < end:
        util = source.utilisation(0, t)
        requests = int(util / 100 * 40 * step_s)  # up to 40 req/s at full load
        median = 60.0 * (1 + util / 100)
        cdf = [_lognormal_cdf(b, median, 0.6) for b in LATENCY_LE_MS]
        counts = [round(requests * c) for c in cdf] + [requests]  # cumulative, last = +Inf
        windows.append({"workload": slug, "end": t + step_s, "requests": requests,
                        "success": requests, "failure": 0, "tokens": requests * 180,
                        "latency": {"unit": "ms", "le": LATENCY_LE_MS, "counts": counts,
                                    "cumulative": True}})
        t += step_s
    return windows


def seed_workloads(team: Team, hosts: dict, days: float) -> None:
    """A serving workload with simulated traffic and a finished (simulated) training job."""
    now = time.time()
    serving, _ = Workload.objects.get_or_create(
        team=team, slug="chat-llm",
        defaults={"name": "chat-llm", "kind": WorkloadKind.INFERENCE, "latency_critical": True,
                  "description": "Simulated LLM chat service (demo)"})
    serving.hosts.set([hosts[HISTORY_HOST][0]])
    training, _ = Workload.objects.get_or_create(
        team=team, slug="vision-training",
        defaults={"name": "vision-training", "kind": WorkloadKind.TRAINING,
                  "interruptible": True, "checkpoint_interval_min": 30,
                  "description": "Simulated checkpointed training (demo)"})
    training.hosts.set([hosts[LIVE_HOST][0]])
    source = SimulatedSource(HISTORY_GPUS, seed=2)
    windows = simulated_windows("chat-llm", source, now - days * 86400 + 600, now - 300, 300.0)
    for i in range(0, len(windows), inference.MAX_WINDOWS):
        inference.accept(team, {"batch_id": str(uuid.uuid4()),
                                "windows": windows[i:i + inference.MAX_WINDOWS]},
                         sender="demo (simulated)")
    started = now - 3 * 86400
    job = jobs.start_job(team, {"workload": "vision-training", "name": "resnet50 90 epochs",
                                "started_at": started}, started_by="demo (simulated)",
                         now_s=now)
    jobs.stop_job(job, {"stopped_at": started + 8 * 3600}, now_s=now)
    start = dt.datetime.fromtimestamp(now - days * 86400, dt.UTC)
    rollup.rebuild(team, start, dt.datetime.fromtimestamp(now, dt.UTC))


class Command(BaseCommand):
    help = "Set up GreenOps on the embedded default with simulated data and run it."

    def add_arguments(self, parser) -> None:
        parser.add_argument("--port", type=int, default=int(os.environ.get("PORT", 8000)))
        parser.add_argument("--days", type=float, default=7.0, help="days of history to backfill")
        parser.add_argument("--no-serve", action="store_true", help="set up and exit")

    def handle(self, *args, port: int, days: float, no_serve: bool, **options) -> None:
        Path(settings.DATA_DIR).mkdir(parents=True, exist_ok=True)
        # Static files are served from the apps (no collectstatic in the demo); an empty
        # STATIC_ROOT keeps WhiteNoise from warning that it is missing.
        Path(settings.STATIC_ROOT).mkdir(parents=True, exist_ok=True)
        call_command("migrate", interactive=False, verbosity=0)
        team, live_token = self.seed(days)
        url = f"http://127.0.0.1:{port}"
        self.stdout.write(self.style.SUCCESS(
            f"\nGreenOps demo is ready: {url}/\n"
            f"  login: {DEMO_USER} / {DEMO_PASSWORD}\n"
            f"  team dashboard: {url}/teams/{team.slug}/\n"
            f"  data: simulated (a simulated agent with {LIVE_GPUS} GPUs feeds live samples;"
            f" {days:g} days of simulated history)\n"
            f"  database: {settings.DATABASES['default']['NAME']}\n"
        ))
        if no_serve:
            return
        self.serve(port, live_token)

    @transaction.atomic
    def seed(self, days: float) -> tuple[Team, str]:
        user, created = User.objects.get_or_create(username=DEMO_USER,
                                                   defaults={"email": "demo@example.com"})
        user.set_password(DEMO_PASSWORD)
        user.save()
        team, _ = Team.objects.get_or_create(slug="ml-platform",
                                             defaults={"name": "ML Platform (demo)"})
        Membership.objects.get_or_create(team=team, user=user, defaults={"role": Role.OWNER})
        hosts = {}
        for name, region, itype in ((LIVE_HOST, "us-east-1", "p5.48xlarge"),
                                    (HISTORY_HOST, "eu-west-1", "g6e.12xlarge")):
            host = Host.objects.filter(team=team, name=name).first()
            if host is None:
                host = Host(team=team, name=name, hostname=name, provider="aws", region=region,
                            country="USA" if region.startswith("us") else "IRL",
                            instance_type=itype)
            token = host.set_new_token()  # shown to the local agent only; rotated each start
            host.save()
            hosts[name] = (host, token)
        if not GpuSample.objects.filter(gpu__in=Gpu.objects.filter(host__team=team)).exists():
            self.stdout.write(f"Backfilling {days:g} days of simulated history…")
            for seed, (name, n) in enumerate(((LIVE_HOST, LIVE_GPUS),
                                              (HISTORY_HOST, HISTORY_GPUS))):
                backfill(hosts[name][0], n, days, step_s=60.0, seed=seed + 1)
            self.stdout.write("Simulating inference traffic, a training job and KPI rollups…")
            seed_workloads(team, hosts, days)
        return team, hosts[LIVE_HOST][1]

    def serve(self, port: int, token: str) -> None:
        env = dict(os.environ, GREENOPS_TOKEN=token)
        agent = subprocess.Popen(
            [sys.executable, "-m", "collectors.cli", "run", "--simulate", str(LIVE_GPUS),
             "--seed", "1", "--server", f"http://127.0.0.1:{port}",
             "--spool", str(Path(settings.DATA_DIR) / "demo-agent-spool.db")],
            env=env,
        )
        stop = threading.Event()
        embedded_beat.start(stop)  # rollups, KPI and price tasks, as beat would run them
        try:
            call_command("runserver", f"127.0.0.1:{port}", use_reloader=False)
        finally:
            stop.set()
            agent.send_signal(signal.SIGTERM)
            try:
                agent.wait(timeout=10)
            except subprocess.TimeoutExpired:
                agent.kill()
