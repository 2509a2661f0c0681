"""Seeding the demo: logins, two teams, their hosts, sites and workloads, and simulated history
stored through the same validation and storage code as real batches (greenops.demo.story says
what the fleet does). Idempotent: a second run keeps what the first stored.
"""

from __future__ import annotations

import datetime as dt
import time
import uuid
from dataclasses import dataclass

from django.contrib.auth.models import User
from django.db import transaction
from django.test import override_settings

from collectors.batch import SampleBuffer, build_batch
from collectors.energy import EnergyAccountant
from greenops.carbon.models import HostSite, Site
from greenops.demo.story import (
    CHAT_WORKLOAD,
    DEV_IDLE_FOR_S,
    HOSTS,
    DemoHost,
    StorySource,
    chat_windows,
    training_runs,
)
from greenops.kpis import inference, rollup
from greenops.teams.models import ApiToken, Membership, Role, Team
from greenops.telemetry import partitions, store, wire
from greenops.telemetry.ingest import known_gpus, register_inventory
from greenops.telemetry.models import Gpu, GpuSample, Host
from greenops.workloads import jobs
from greenops.workloads.models import Workload, WorkloadKind

DEMO_USER, DEMO_PASSWORD = "demo", "greenops-demo"
# A second login that may look at ML Platform but change nothing: the permission matrix at work.
VIEWER_USER = "viewer"
TEAMS = {"ml-platform": "ML Platform (demo)", "research": "Research (demo)"}
# One sample per GPU per minute: the minute rollups (idle minutes, GPU-minutes) then see every
# minute as a real agent's would. Coarser history would understate idle cost.
STEP_S = 60.0
# AWS us-east-1: a hyperscaler PUE (AWS reports ~1.15 for its fleet); grid from the US table.
SITE = {"name": "AWS us-east-1", "pue": 1.15, "provider": "aws", "region": "us-east-1",
        "country": "USA"}


@dataclass
class Seeded:
    teams: dict[str, Team]
    host_tokens: dict[str, str]  # host name -> agent token, rotated each start
    api_token: str  # ML Platform's API token for the live chat traffic
    idle_since: float  # when the research box was last used
    backfilled: bool


def backfill(host: Host, story: StorySource, start: float, end: float) -> int:
    """Simulated samples from start to end, one per GPU per STEP_S, stored as real batches
    are."""
    t = [start]
    story._clock = lambda: t[0]  # the source reads the backfill's clock, not the wall clock
    register_inventory(host, {"gpus": [g.__dict__ for g in story.gpus()], "hostname": host.name})
    gpu_ids = known_gpus(host)
    energy = EnergyAccountant(max_gap_s=5 * STEP_S)
    stored = 0
    buf = SampleBuffer()
    while t[0] < end:
        for i in range(story.host.gpus):
            reading = story.read(i)
            joules, method = energy.update(i, t[0], reading.energy_mj, reading.power_w)
            buf.append(t[0], i, reading, joules, method)
        t[0] += STEP_S
        if len(buf) >= 20_000 or t[0] >= end:
            doc = build_batch(buf.columns(), "simulated")
            batch = wire.parse_batch(doc, now_s=end + 60, max_samples=1 << 30, max_future_s=300,
                                     max_age_s=end - start + 3600)
            stored += store.store_batch(batch, gpu_ids)
            buf.clear()
    return stored


def _user(name: str, password: str) -> User:
    user, _ = User.objects.get_or_create(username=name,
                                         defaults={"email": f"{name}@example.com"})
    user.set_password(password)
    user.save()
    return user


def _host(team: Team, spec: DemoHost, created: dt.datetime) -> tuple[Host, str]:
    host = Host.objects.filter(team=team, name=spec.name).first()
    if host is None:
        host = Host(team=team, name=spec.name, hostname=spec.name, provider="aws",
                    region=spec.region, country="USA", instance_type=spec.instance_type)
    token = host.set_new_token()  # handed to the local demo agent only
    host.save()
    # Enrolled when its history begins, so "since" figures and commitments start there.
    Host.objects.filter(id=host.id, created_at__gt=created).update(created_at=created)
    site, _ = Site.objects.get_or_create(team=team, name=SITE["name"], defaults={
        k: v for k, v in SITE.items() if k != "name"})
    HostSite.objects.update_or_create(host=host, defaults={"site": site})
    return host, token


def _workloads(teams: dict[str, Team], hosts: dict[str, Host]) -> None:
    ml = teams["ml-platform"]
    chat, _ = Workload.objects.get_or_create(team=ml, slug=CHAT_WORKLOAD, defaults={
        "name": "Chat assistant", "kind": WorkloadKind.INFERENCE, "latency_critical": True,
        "description": "Llama 3.1 8B Instruct on vLLM, ~180 output tokens per reply "
                       "(simulated demo traffic)"})
    chat.hosts.set([hosts["serving-g6e-01"]])
    ft, _ = Workload.objects.get_or_create(team=ml, slug="llm-finetune", defaults={
        "name": "LLM fine-tuning", "kind": WorkloadKind.TRAINING, "interruptible": True,
        "checkpoint_interval_min": 30,
        "description": "Checkpointed fine-tuning runs on 4 or 8 H100s (simulated)"})
    ft.hosts.set([hosts["trainer-p5-01"]])
    exp, _ = Workload.objects.get_or_create(team=teams["research"], slug="experiments", defaults={
        "name": "Experiments", "kind": WorkloadKind.TRAINING, "interruptible": True,
        "checkpoint_interval_min": 60, "description": "Ad-hoc experiments (simulated)"})
    exp.hosts.set([hosts["dev-g6e-01"]])


def _history(teams: dict[str, Team], hosts: dict[str, Host], start: float, now: float,
             idle_since: float) -> None:
    # PostgreSQL: the history gets its day/week partitions first instead of filling the default
    # partition until beat's next create_partitions (SQLite: nothing to do).
    partitions.create_range(dt.datetime.fromtimestamp(start, dt.UTC),
                            dt.datetime.fromtimestamp(now, dt.UTC))
    for spec in HOSTS:
        backfill(hosts[spec.name], StorySource(spec, time.time, idle_since), start, now - 60)
    serving = next(h for h in HOSTS if h.story == "serving")
    windows = chat_windows(StorySource(serving, time.time, idle_since), start + 300, now - 300,
                           300.0)
    ml = teams["ml-platform"]
    # History older than the intake's age limit is the point of a backfill: lift it here only.
    with override_settings(INGEST_MAX_AGE_S=int(now - start) + 3600):
        for i in range(0, len(windows), inference.MAX_WINDOWS):
            inference.accept(ml, {"batch_id": str(uuid.uuid4()),
                                  "windows": windows[i:i + inference.MAX_WINDOWS]},
                             sender="demo (simulated)")
    trainer = next(h for h in HOSTS if h.story == "training")
    # The last two weeks of fine-tuning runs as training jobs (older runs are in the usage).
    for n, (t0, t1, gpus) in enumerate(training_runs(trainer, now - 14 * 86400, now - 60), 1):
        job = jobs.start_job(ml, {"workload": "llm-finetune", "name": f"llama-ft run {n}",
                                  "host": trainer.name, "gpus": list(range(gpus)),
                                  "started_at": t0}, started_by="demo (simulated)", now_s=now)
        jobs.stop_job(job, {"stopped_at": t1}, now_s=now)
    for team in teams.values():
        rollup.rebuild(team, dt.datetime.fromtimestamp(start, dt.UTC),
                       dt.datetime.fromtimestamp(now, dt.UTC))


@transaction.atomic
def seed(days: float, now: float | None = None) -> Seeded:
    now = time.time() if now is None else now
    start = now - days * 86400
    owner = _user(DEMO_USER, DEMO_PASSWORD)
    viewer = _user(VIEWER_USER, DEMO_PASSWORD)
    teams = {}
    for slug, name in TEAMS.items():
        team, _ = Team.objects.get_or_create(slug=slug, defaults={"name": name})
        Membership.objects.get_or_create(team=team, user=owner, defaults={"role": Role.OWNER})
        teams[slug] = team
    Membership.objects.get_or_create(team=teams["ml-platform"], user=viewer,
                                     defaults={"role": Role.VIEWER})
    created = dt.datetime.fromtimestamp(start, dt.UTC)
    hosts, tokens = {}, {}
    for spec in HOSTS:
        hosts[spec.name], tokens[spec.name] = _host(teams[spec.team], spec, created)
    _workloads(teams, hosts)
    ApiToken.objects.filter(team=teams["ml-platform"], name="demo chat traffic").delete()
    _, api_token = ApiToken.issue(teams["ml-platform"], "demo chat traffic")
    # The research box's story is anchored to the first seeding (when its workload was
    # registered), so a restart tells the same story.
    first = Workload.objects.get(team=teams["research"], slug="experiments").created_at
    idle_since = first.timestamp() - DEV_IDLE_FOR_S
    fresh = not GpuSample.objects.filter(
        gpu__in=Gpu.objects.filter(host__in=list(hosts.values()))).exists()
    if fresh:
        _history(teams, hosts, start, now, idle_since)
    return Seeded(teams, tokens, api_token, idle_since, fresh)
