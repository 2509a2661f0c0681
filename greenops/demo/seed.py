"""Seeding the demo: logins, three teams, their hosts, sites and workloads, and simulated
history (greenops.demo.story says what the fleet does). The samples are drawn as a running
agent draws them and validated as ingest validates a batch, then written in bulk: PostgreSQL
through ingest's own COPY and set-based fold, SQLite as one executemany and the rollups as one
grouped statement per table over the whole history -- the same rows ingest stores batch by
batch (tests/core/test_demo_seed.py compares the two). Idempotent: a second run keeps what the
first stored.
"""

from __future__ import annotations

import contextlib
import datetime as dt
import time
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from decimal import Decimal

from django.conf import settings
from django.contrib.auth.models import User
from django.db import connection, transaction
from django.test import override_settings

from collectors.batch import SampleBuffer, build_batch
from collectors.energy import EnergyAccountant
from collectors.simulated import unit
from greenops.alerts import channels as alert_channels
from greenops.alerts import evaluate as alert_evaluate
from greenops.alerts import notify as alert_notify
from greenops.alerts import rules as alert_rules
from greenops.alerts.models import Rule
from greenops.benchmarks import runs as benchmark_runs
from greenops.benchmarks.models import BenchmarkRun
from greenops.carbon.models import HostSite, Site
from greenops.costs.models import HostCostConfig, InstanceType, Price, PriceMethod, PriceOption
from greenops.demo.story import (
    CHAT_WORKLOAD,
    DEV_IDLE_FOR_S,
    FLEET_HOSTS,
    FLEET_MODEL,
    FLEET_TEAM,
    HOSTS,
    DemoHost,
    StorySource,
    chat_windows,
    training_runs,
)
from greenops.kpis import inference, rollup
from greenops.reports import generate as reports_generate
from greenops.reports.month_figures import Month
from greenops.teams.models import ApiToken, Membership, Role, Team
from greenops.telemetry import partitions, store, wire
from greenops.telemetry.ingest import known_gpus, register_inventory
from greenops.telemetry.models import Gpu, GpuSample, Host
from greenops.windows import floor_day, floor_hour
from greenops.workloads import jobs
from greenops.workloads.models import Workload, WorkloadKind

DEMO_USER, DEMO_PASSWORD = "demo", "greenops-demo"
# A second login that may look at ML Platform but change nothing: the permission matrix at work.
VIEWER_USER = "viewer"
TEAMS = {
    "ml-platform": "ML Platform (demo)",
    "research": "Research (demo)",
    FLEET_TEAM: "Inference fleet (demo)",
}
# One sample per GPU per minute: the minute rollups (idle minutes, GPU-minutes) then see every
# minute as a real agent's would. Coarser history would understate idle cost.
STEP_S = 60.0


# AWS regions: a hyperscaler PUE (AWS reports ~1.15 for its fleet); grid from the US state
# table (us-east-1: Virginia, us-west-2: Oregon).
def _aws_site(region: str) -> dict:
    return {
        "name": f"AWS {region}",
        "pue": 1.15,
        "provider": "aws",
        "region": region,
        "country": "USA",
    }


SITE = _aws_site("us-east-1")
# The inference fleet's own facilities: a colocation hall in Ashburn (a typical colo PUE of
# 1.4) and a store's back office (no cooling overhead counted: PUE 1.0), both on Virginia's grid.
SITES = {
    "colo-ashburn": {
        "name": "Colocation Ashburn VA (demo)",
        "pue": 1.4,
        "provider": "",
        "region": "VA",
        "country": "USA",
    },
    "edge-store": {
        "name": "Store 0147 back office (demo)",
        "pue": 1.0,
        "provider": "",
        "region": "VA",
        "country": "USA",
    },
}


@dataclass
class Seeded:
    teams: dict[str, Team]
    host_tokens: dict[str, str]  # host name -> agent token, rotated each start
    api_token: str  # ML Platform's API token for the live chat traffic
    idle_since: float  # when the research box was last used
    backfilled: bool
    history_end: float | None = None  # the first minute the seeded history does not hold
    chat_until: float | None = None  # where the seeded chat windows end
    histories: list[HostHistory] = field(default_factory=list)  # the live hosts', to join_live


class Progress:
    """Where seed() reports its steps: `with progress.step(label, total) as advance:` then
    advance(n) as work is done. This one reports nothing (tests); `manage.py demo` passes a
    progress bar."""

    @contextlib.contextmanager
    def step(self, label: str, total: float, unit: str = "") -> Iterator[Callable[[float], None]]:
        yield lambda n: None


def floor_minute(t: float) -> float:
    return t - t % STEP_S


class HostHistory:
    """One demo host's simulated samples, one per GPU per STEP_S on whole minutes, drawn
    window after window from its story with the agent's own energy accounting, so the windows
    join up as a running agent's batches do."""

    def __init__(self, host: Host, spec: DemoHost, idle_since: float, start: float) -> None:
        self.host, self.spec = host, spec
        self.t = floor_minute(start)
        self.story = StorySource(spec, lambda: self.t, idle_since)
        self.energy = EnergyAccountant(max_gap_s=5 * STEP_S)
        register_inventory(
            host, {"gpus": [g.__dict__ for g in self.story.gpus()], "hostname": host.name}
        )
        self.gpu_ids = known_gpus(host)

    def batches(self, end: float, per_batch: int = 20_000) -> Iterator[wire.Batch]:
        """The samples from where the last call stopped up to `end` (exclusive), as validated
        wire batches of about `per_batch` samples."""
        buf = SampleBuffer()
        while self.t < end:
            for i in range(self.spec.gpus):
                reading = self.story.read(i)
                joules, method = self.energy.update(i, self.t, reading.energy_mj, reading.power_w)
                buf.append(self.t, i, reading, joules, method)
            self.t += STEP_S
            if len(buf) >= per_batch or (self.t >= end and len(buf)):
                doc = build_batch(buf.columns(), "simulated")
                yield wire.parse_batch(
                    doc, now_s=end + 60, max_samples=1 << 30, max_future_s=300, max_age_s=1 << 40
                )
                buf.clear()


def backfill(
    history: HostHistory,
    end: float,
    bulk: bool = True,
    advance: Callable[[float], None] = lambda n: None,
) -> int:
    """Store the host's samples up to `end`. bulk: the set-based way (store_bulk, then
    rebuild_rollups over the whole window once); else each batch through ingest's store,
    as a running agent's batches are stored (tests compare the two)."""
    stored, lo = 0, history.t
    for batch in history.batches(end, per_batch=20_000 if bulk else 10 * history.spec.gpus):
        stored += (store_bulk if bulk else store.store_batch)(batch, history.gpu_ids)
        advance(batch.n)
    if bulk and connection.vendor != "postgresql" and history.t > lo:
        rebuild_rollups([*history.gpu_ids.values()], lo, history.t)
    return stored


def backfill_rollups(
    history: HostHistory, end: float, advance: Callable[[float], None] = lambda n: None
) -> int:
    """The host's history up to `end` as rollups only: the same samples drawn as backfill
    draws them (the story and the energy accounting carry on into what follows), staged in a
    temporary table and folded into the minute, hour and day rollups by ingest's own
    statements, and never written as raw samples. Raw samples are kept RETAIN_RAW_SAMPLES_DAYS
    (35 days) and read only by the live charts' last hours; the rollups are what every page
    range, the KPI rollups (GPU-minutes are counted from minute rows, kept 14 weeks), costs,
    alerts and the monthly report read. Whole hours and days only: `end` is a UTC midnight, so
    no rollup bucket is shared with the full-resolution history after it (SQLite rebuilds a
    touched bucket from raw samples). Returns the samples folded."""
    folded, lo = 0, history.t
    for batch in history.batches(end):
        folded += (_fold_postgres if connection.vendor == "postgresql" else _stage_sqlite)(
            batch, history.gpu_ids
        )
        advance(batch.n)
    if connection.vendor != "postgresql" and history.t > lo:
        rebuild_rollups([*history.gpu_ids.values()], lo, history.t, source=_SQLITE_STAGE)
        with connection.cursor() as cursor:
            cursor.execute(f"DELETE FROM {_SQLITE_STAGE}")
    return folded


# ingest's fold (minute, hour and day rollups, the hours' and days' minute counts) read from the
# stage with no INSERT into the samples before it. Each batch of HostHistory.batches holds whole
# minutes, so a minute is never split across two folds (its util/idle flip is counted once).
_PG_FOLD_ONLY = "WITH ins AS (SELECT 1 FROM gpusample_stage" + store._fold("gpusample_stage")
_SQLITE_STAGE = "temp.demo_rollup_stage"


def _fold_postgres(batch: wire.Batch, gpu_ids: dict[int, int]) -> int:
    values, nulls = store.batch_columns(batch, gpu_ids)
    payload = store.copy_binary(values, nulls, batch.n)
    with transaction.atomic(), connection.cursor() as cursor:
        store._ensure_stage(cursor)
        with cursor.copy(
            f"COPY gpusample_stage ({store.COLUMN_LIST}) FROM STDIN (FORMAT BINARY)"
        ) as cp:
            cp.write(payload)
        cursor.execute(_PG_FOLD_ONLY)
        cursor.execute("DELETE FROM gpusample_stage")
    return batch.n


def _stage_sqlite(batch: wire.Batch, gpu_ids: dict[int, int]) -> int:
    with connection.cursor() as cursor:
        cursor.execute(
            f"CREATE TEMP TABLE IF NOT EXISTS {_SQLITE_STAGE.split('.')[1]} AS "
            "SELECT * FROM telemetry_gpusample WHERE 0"
        )
    return store_bulk(batch, gpu_ids, table=_SQLITE_STAGE)


def store_bulk(
    batch: wire.Batch, gpu_ids: dict[int, int], table: str = "telemetry_gpusample"
) -> int:
    """The samples of a batch in one bulk write. PostgreSQL: ingest's own COPY into the stage
    and one set-based fold into every rollup (greenops.telemetry.store), which is already bulk.
    SQLite: one executemany of the prepared rows, the rollups left to rebuild_rollups, once
    for the whole history instead of once per batch (ingest recounts each batch's buckets)."""
    if connection.vendor == "postgresql" and table == "telemetry_gpusample":
        return store.store_batch(batch, gpu_ids)
    values, nulls = store.batch_columns(batch, gpu_ids)
    columns = []
    for name, _ in store.SAMPLE_COLUMNS:
        col = store._sqlite_timestamps(values["ts"]) if name == "ts" else values[name].tolist()
        mask = nulls.get(name)
        if mask is not None and mask.any():
            col = [None if m else v for v, m in zip(col, mask.tolist(), strict=True)]
        columns.append(col)
    placeholders = ", ".join(["%s"] * len(store.SAMPLE_COLUMNS))
    with transaction.atomic(), connection.cursor() as cursor:
        cursor.executemany(
            f"INSERT OR IGNORE INTO {table} ({store.COLUMN_LIST}) VALUES ({placeholders})",
            list(zip(*columns, strict=True)),
        )
        return cursor.rowcount


# The hour and day rollups' minute counts, from the minute rollups in one grouped pass (ingest's
# SQLite statement recounts them bucket by bucket, a scan of the GPU's minutes per bucket).
_SQLITE_COUNTS = f"""
    UPDATE {{table}} SET util_minutes = c.n, idle_minutes = c.idle
    FROM (SELECT gpu_id, strftime('{{fmt}}', bucket) AS b, count(*) AS n,
                 sum(util_sum < util_n * {store.IDLE_UTIL_PCT}) AS idle
          FROM telemetry_gpuminute
          WHERE util_n > 0 AND gpu_id IN ({{ids}}) AND bucket >= %s AND bucket < %s
          GROUP BY 1, 2) AS c
    WHERE {{table}}.gpu_id = c.gpu_id AND {{table}}.bucket = c.b
"""


def rebuild_rollups(
    gpu_ids: list[int], lo: float, hi: float, source: str = "telemetry_gpusample"
) -> None:
    """SQLite: the minute, hour and day rollups of these GPUs' samples in [lo, hi) (read from
    `source`: the samples table, or backfill_rollups' stage), each table in one INSERT ...
    SELECT ... GROUP BY -- ingest's own statement (store._SQLITE_ROLLUP) -- and the minute
    counts in one grouped UPDATE."""
    ids = ",".join(str(int(g)) for g in gpu_ids)
    rollup_sql = store._SQLITE_ROLLUP.replace("FROM telemetry_gpusample", f"FROM {source}")
    with transaction.atomic(), connection.cursor() as cursor:
        for table, fmt, step in store._SQLITE_BUCKETS:
            bounds = [_sqlite_time(lo - lo % step), _sqlite_time(hi - hi % step + step)]
            cursor.execute(rollup_sql.format(table=table, fmt=fmt, ids=ids), bounds)
            if table != "telemetry_gpuminute":
                cursor.execute(_SQLITE_COUNTS.format(table=table, fmt=fmt, ids=ids), bounds)


def _sqlite_time(t: float) -> str:
    return dt.datetime.fromtimestamp(t, dt.UTC).strftime("%Y-%m-%d %H:%M:%S")


def _user(name: str, password: str) -> User:
    user, _ = User.objects.get_or_create(username=name, defaults={"email": f"{name}@example.com"})
    user.set_password(password)
    user.save()
    return user


def _host(team: Team, spec: DemoHost, created: dt.datetime) -> tuple[Host, str]:
    host = Host.objects.filter(team=team, name=spec.name).first()
    if host is None:
        host = Host(
            team=team,
            name=spec.name,
            hostname=spec.name,
            provider="aws" if spec.instance_type else "on_prem",
            purchase_option="on_demand" if spec.instance_type else "on_prem",
            region=spec.region,
            country="USA",
            instance_type=spec.instance_type,
        )
    token = host.set_new_token()  # handed to the local demo agent only
    host.save()
    # Enrolled when its history begins, so "since" figures and commitments start there.
    Host.objects.filter(id=host.id, created_at__gt=created).update(created_at=created)
    where = SITES[spec.site] if spec.site else _aws_site(spec.region)
    site, _ = Site.objects.get_or_create(
        team=team, name=where["name"], defaults={k: v for k, v in where.items() if k != "name"}
    )
    HostSite.objects.update_or_create(host=host, defaults={"site": site})
    if spec.name in ON_PREM_HARDWARE_USD:
        HostCostConfig.objects.update_or_create(
            host=host,
            defaults={
                "hardware_usd": Decimal(ON_PREM_HARDWARE_USD[spec.name]),
                "amortisation_months": 36,
                "electricity_usd_per_kwh": Decimal("0.09"),
                "source": "estimate: list price of the system (simulated demo)",
            },
        )
    return host, token


# On-premises systems of the inference fleet, bought outright: an 8x MI300X server at about
# $250,000 and a Jetson AGX Orin 64GB developer kit at $1,999 (NVIDIA's list price).
ON_PREM_HARDWARE_USD = {FLEET_HOSTS[1].name: "250000", FLEET_HOSTS[3].name: "1999"}
# inf2.xlarge is not in the bundled catalog: its us-east-1 on-demand price ($0.7582/h, AWS's
# price list) and board, entered for the demo and saying so.
INF2 = {
    "provider": "aws",
    "name": "inf2.xlarge",
    "gpu_model": "AWS Inferentia2",
    "gpu_count": 1,
    "gpu_memory_gib": 32,
    "usd_per_hour": Decimal("0.7582"),
}


def _catalog() -> None:
    InstanceType.objects.get_or_create(
        provider=INF2["provider"],
        name=INF2["name"],
        defaults={
            "gpu_model": INF2["gpu_model"],
            "gpu_count": INF2["gpu_count"],
            "gpu_memory_gib": INF2["gpu_memory_gib"],
            "source": "AWS price list (entered by the demo)",
        },
    )
    Price.objects.get_or_create(
        provider="aws",
        region="us-east-1",
        instance_type=INF2["name"],
        option=PriceOption.ON_DEMAND,
        defaults={
            "usd_per_hour": INF2["usd_per_hour"],
            "method": PriceMethod.SNAPSHOT,
            "source": "AWS price list, inf2.xlarge on-demand us-east-1 (entered by the demo)",
            "as_of": dt.datetime(2025, 1, 1, tzinfo=dt.UTC),
        },
    )


def _workloads(teams: dict[str, Team], hosts: dict[str, Host]) -> None:
    ml = teams["ml-platform"]
    chat, _ = Workload.objects.get_or_create(
        team=ml,
        slug=CHAT_WORKLOAD,
        defaults={
            "name": "Chat assistant",
            "kind": WorkloadKind.INFERENCE,
            "latency_critical": True,
            "description": "Llama 3.1 8B Instruct on vLLM, ~180 output tokens per reply "
            "(simulated demo traffic)",
        },
    )
    chat.hosts.set([hosts[HOSTS[1].name]])
    ft, _ = Workload.objects.get_or_create(
        team=ml,
        slug="llm-finetune",
        defaults={
            "name": "LLM fine-tuning",
            "kind": WorkloadKind.TRAINING,
            "interruptible": True,
            "checkpoint_interval_min": 30,
            "description": "Checkpointed fine-tuning runs on 4 or 8 H100s (simulated)",
        },
    )
    ft.hosts.set([hosts[HOSTS[0].name]])
    exp, _ = Workload.objects.get_or_create(
        team=teams["research"],
        slug="experiments",
        defaults={
            "name": "Experiments",
            "kind": WorkloadKind.TRAINING,
            "interruptible": True,
            "checkpoint_interval_min": 60,
            "description": "Ad-hoc experiments (simulated)",
        },
    )
    exp.hosts.set([hosts[HOSTS[2].name]])


def seed_fleet(
    team: Team,
    hosts: dict[str, Host],
    start: float,
    end: float,
    idle_since: float,
    progress: Progress,
) -> None:
    """The mixed-accelerator inference fleet (issue 33): the same model on H100, MI300X and
    Inferentia2, and an edge box, each with its GPU samples and its inference windows, so
    energy, cost and CO2e per inference compare across accelerators. History only: no live
    agents (the demo's three live hosts are the story's)."""
    for spec in FLEET_HOSTS:
        host = hosts[spec.name]
        w, _ = Workload.objects.get_or_create(
            team=team,
            slug=spec.workload,
            defaults={
                "name": f"{FLEET_MODEL} on {spec.model.name}",
                "kind": WorkloadKind.INFERENCE,
                "latency_critical": spec.story == "serving",
                "served_model": FLEET_MODEL,
                "p99_target_ms": spec.p99_target_ms,
                "description": f"{FLEET_MODEL} served on {spec.gpus}x {spec.model.name}, "
                "~180 output tokens per reply (simulated"
                + (f"; {spec.note})" if spec.note else ")"),
            },
        )
        w.hosts.set([host])
    total = sum(h.gpus for h in FLEET_HOSTS) * (end - start) / STEP_S
    with progress.step("Mixed-accelerator fleet: samples", total, "samples") as advance:
        for spec in FLEET_HOSTS:
            backfill(HostHistory(hosts[spec.name], spec, idle_since, start), end, advance=advance)
    with progress.step("Mixed-accelerator fleet: inference", len(FLEET_HOSTS)) as advance:
        for spec in FLEET_HOSTS:
            _inference(team, StorySource(spec, time.time, idle_since), start, end)
            advance(1)


def _inference(team: Team, source: StorySource, start: float, end: float) -> None:
    windows = chat_windows(source, start, end, INFERENCE_STEP_S)
    # History older than the intake's age limit is the point of a backfill: lift it here only.
    with override_settings(INGEST_MAX_AGE_S=int(time.time() - start) + 3600):
        for i in range(0, len(windows), inference.MAX_WINDOWS):
            inference.accept(
                team,
                {"batch_id": str(uuid.uuid4()), "windows": windows[i : i + inference.MAX_WINDOWS]},
                sender="demo (simulated)",
            )


INFERENCE_STEP_S = 300.0
# Days of history of the inference fleet: its per-inference figures compare over a day or two.
FLEET_DAYS = 3.0


def _kpis(
    teams: list[Team],
    start: float,
    end: float,
    progress: Progress,
    label: str = "KPI rollups (hour, day)",
) -> None:
    """Every hour of [start, end) of each team through the KPI rollup (as beat's rebuild does),
    then the days those hours touch."""
    first = floor_hour(dt.datetime.fromtimestamp(start, dt.UTC))
    last = dt.datetime.fromtimestamp(end, dt.UTC)
    hours = []
    while first < last:
        hours.append(first)
        first += rollup.HOUR
    factors = rollup.cached_factors()
    with progress.step(label, len(hours) * len(teams), "team-hours") as advance:
        for team in teams:
            for hour in hours:
                rollup.rollup_hour(team, hour, factors)
                advance(1)
            for day in sorted({floor_day(h) for h in hours}):
                rollup.rollup_day(team, day)


# Two resolutions: the last DETAIL_DAYS days (the live charts' hour, day and week ranges) as raw
# samples and their rollups, as the agents would have sent them; everything older as the minute,
# hour and day rollups alone (backfill_rollups: the same rows ingest's rollups hold for those
# samples, without the raw samples, which no page reads that far back and retention drops after
# RETAIN_RAW_SAMPLES_DAYS). Seeding the rollups alone costs a fraction of the raw samples.
DETAIL_DAYS = 7


def detail_start(start: float, end: float) -> float:
    """Where the full-resolution history begins: the UTC midnight at or before DETAIL_DAYS
    before `end` (whole days, so no hour or day rollup straddles the two resolutions)."""
    t = end - DETAIL_DAYS * 86400
    return max(start, t - t % 86400)


def history_days(now: float) -> float:
    """What tells the story: the whole previous calendar month (its report is generated) and
    this month so far -- 31 to 62 days -- of which the last week is what the live charts show."""
    today = dt.datetime.fromtimestamp(now, dt.UTC)
    first = today.replace(day=1, hour=0, minute=0, second=0, microsecond=0)
    previous = (first - dt.timedelta(days=1)).replace(day=1)
    return (now - previous.timestamp()) / 86400 + 1 / 24  # an hour before the month begins


@transaction.atomic
def seed(
    days: float,
    now: float | None = None,
    progress: Progress | None = None,
    fleet_days: float = FLEET_DAYS,
    catch_up: bool = True,
) -> Seeded:
    """Seed the demo: `days` of history for the story's hosts, `fleet_days` for the inference
    fleet. With catch_up, the history is topped up to the current minute at the end (the
    seeding itself takes a while), so live agents started right after it continue it without a
    hole."""
    progress = progress or Progress()
    now = time.time() if now is None else now
    end = floor_minute(now)
    start = end - days * 86400
    with progress.step("Teams, logins and hosts", 1) as advance:
        owner = _user(DEMO_USER, DEMO_PASSWORD)
        viewer = _user(VIEWER_USER, DEMO_PASSWORD)
        teams = {}
        for slug, name in TEAMS.items():
            team, _ = Team.objects.get_or_create(slug=slug, defaults={"name": name})
            Membership.objects.get_or_create(team=team, user=owner, defaults={"role": Role.OWNER})
            teams[slug] = team
        Membership.objects.get_or_create(
            team=teams["ml-platform"], user=viewer, defaults={"role": Role.VIEWER}
        )
        created = dt.datetime.fromtimestamp(start, dt.UTC)
        fleet_start = end - fleet_days * 86400
        hosts, tokens = {}, {}
        for spec in HOSTS:
            hosts[spec.name], tokens[spec.name] = _host(teams[spec.team], spec, created)
        if fleet_days > 0:
            for spec in FLEET_HOSTS:
                hosts[spec.name], _ = _host(
                    teams[FLEET_TEAM], spec, dt.datetime.fromtimestamp(fleet_start, dt.UTC)
                )
        _catalog()
        _workloads(teams, hosts)
        ApiToken.objects.filter(team=teams["ml-platform"], name="demo chat traffic").delete()
        _, api_token = ApiToken.issue(teams["ml-platform"], "demo chat traffic")
        advance(1)
    # The research box's story is anchored to the first seeding (when its workload was
    # registered), so a restart tells the same story.
    first = Workload.objects.get(team=teams["research"], slug="experiments").created_at
    idle_since = first.timestamp() - DEV_IDLE_FOR_S
    fresh = not GpuSample.objects.filter(
        gpu__in=Gpu.objects.filter(host__in=[hosts[h.name] for h in HOSTS])
    ).exists()
    history_end, histories = None, []
    if fresh:
        histories = _history(teams, hosts, start, end, idle_since, progress)
        if fleet_days > 0:
            seed_fleet(teams[FLEET_TEAM], hosts, fleet_start, end, idle_since, progress)
        _kpis([teams[slug] for slug in TEAMS if slug != FLEET_TEAM], start, end, progress)
        if fleet_days > 0:
            _kpis(
                [teams[FLEET_TEAM]],
                fleet_start,
                end,
                progress,
                "Mixed-accelerator fleet: KPI rollups",
            )
        history_end = end
        seed_journeys(teams, end, progress)
        if catch_up:
            history_end = _catch_up(teams, histories, end, progress)
    chat_until = start + (end - start) // INFERENCE_STEP_S * INFERENCE_STEP_S if fresh else None
    return Seeded(teams, tokens, api_token, idle_since, fresh, history_end, chat_until, histories)


def _history(
    teams: dict[str, Team],
    hosts: dict[str, Host],
    start: float,
    end: float,
    idle_since: float,
    progress: Progress,
) -> list[HostHistory]:
    # PostgreSQL: the history gets its day/week partitions first instead of filling the default
    # partition until beat's next create_partitions (SQLite: nothing to do).
    partitions.create_range(
        dt.datetime.fromtimestamp(start, dt.UTC), dt.datetime.fromtimestamp(end + 86400, dt.UTC)
    )
    histories = [HostHistory(hosts[spec.name], spec, idle_since, start) for spec in HOSTS]
    gpus = sum(h.gpus for h in HOSTS)
    detail = detail_start(start, end)
    if detail > start:
        with progress.step(
            "Older history: rollups only", gpus * (detail - start) / STEP_S, "samples"
        ) as advance:
            for history in histories:
                backfill_rollups(history, detail, advance=advance)
    with progress.step(
        f"Last {DETAIL_DAYS} days: GPU samples", gpus * (end - detail) / STEP_S, "samples"
    ) as advance:
        for history in histories:
            backfill(history, end, advance=advance)
    serving = HOSTS[1]
    with progress.step("Chat inference windows", 1) as advance:
        _inference(teams["ml-platform"], StorySource(serving, time.time, idle_since), start, end)
        advance(1)
    trainer = HOSTS[0]
    ml = teams["ml-platform"]
    with progress.step("Training jobs", 1) as advance:
        # The last two weeks of fine-tuning runs as training jobs (older runs are in the usage).
        for n, (t0, t1, gpus) in enumerate(training_runs(trainer, end - 14 * 86400, end), 1):
            job = jobs.start_job(
                ml,
                {
                    "workload": "llm-finetune",
                    "name": f"llama-ft run {n}",
                    "host": trainer.name,
                    "gpus": list(range(gpus)),
                    "started_at": t0,
                },
                started_by="demo (simulated)",
                now_s=end,
            )
            jobs.stop_job(job, {"stopped_at": t1}, now_s=end)
        advance(1)
    return histories


def _catch_up(
    teams: dict[str, Team], histories: list[HostHistory], end: float, progress: Progress
) -> float:
    """Top the live hosts' history up to the current minute: the seeding took a minute or
    more, and the live agents start from now. Repeated until a pass ends inside the minute it
    began in; a pass that starts in the last seconds of a minute waits for the next one, so
    the agents started right after it begin in the minute after the history's last."""
    while True:
        now = time.time()
        if now - floor_minute(now) > STEP_S - 5:
            time.sleep(STEP_S - (now - floor_minute(now)) + 0.1)
            now = time.time()
        target = floor_minute(now)
        if target > end:
            with progress.step(
                "Catching up to now",
                sum(h.spec.gpus for h in histories) * (target - end) / STEP_S,
                "samples",
            ) as advance:
                for history in histories:
                    backfill(history, target, advance=advance)
            _kpis(
                [teams[slug] for slug in TEAMS if slug != FLEET_TEAM],
                end,
                target + STEP_S,
                Progress(),
            )
            end = target
        if floor_minute(time.time()) == target:
            return end


def join_live(
    histories: list[HostHistory], stop: Callable[[], bool], poll_s: float = 1.0
) -> list[str]:
    """Run beside the live agents: as each live host's first live sample arrives, seed its
    history up to the minute of that sample, so the newest seeded minute and the agent's first
    minute are adjacent however long the agent took to start. Returns the hosts joined."""
    waiting, joined = {h.host.id: h for h in histories}, []
    try:
        while waiting and not stop():
            for host_id, history in list(waiting.items()):
                first = (
                    GpuSample.objects.filter(gpu__host_id=host_id, ts__gte=_utc(history.t))
                    .order_by("ts")
                    .values_list("ts", flat=True)
                    .first()
                )
                if first is None:
                    continue
                end = floor_minute(first.timestamp())
                if end > history.t:
                    backfill(history, end)
                del waiting[host_id]
                joined.append(history.host.name)
            time.sleep(poll_s)
    finally:
        connection.close()  # this thread's connection
    return joined


def _utc(t: float) -> dt.datetime:
    return dt.datetime.fromtimestamp(t, dt.UTC)


# The alert e-mail of the demo goes to files in the data dir (Django's file backend): recorded
# and readable there, never sent anywhere.
DEMO_MAIL_DIR = "demo-mail"


def seed_journeys(teams: dict[str, Team], end: float, progress: Progress) -> None:
    """What each journey leaves behind, all simulated and named so: an alert rule that fired
    and resolved with its e-mail notifications, a monthly budget rule, the last closed month's
    report (CSV and PDF), and a benchmark history with one energy-per-inference regression."""
    ml = teams["ml-platform"]
    mail = {
        "EMAIL_BACKEND": "django.core.mail.backends.filebased.EmailBackend",
        "EMAIL_FILE_PATH": str(settings.DATA_DIR / DEMO_MAIL_DIR),
    }
    with (
        progress.step("Alerts: a rule that fired and resolved", 1) as advance,
        override_settings(**mail),
    ):
        _alerts(ml, end)
        advance(1)
    with progress.step("Benchmark history (CI gate)", 1) as advance:
        _benchmarks(ml, end)
        advance(1)
    with progress.step("Last closed month's report", 1) as advance, override_settings(**mail):
        today = dt.datetime.fromtimestamp(end, dt.UTC).date()
        report = reports_generate.request(ml, Month.of(today).previous(), enqueue=False)
        reports_generate.run(report.id)
        advance(1)


def _alerts(team: Team, end: float) -> None:
    if Rule.objects.filter(team=team).exists():
        return
    channel, _ = alert_channels.create(
        team,
        {
            "name": "ML Platform on-call e-mail (demo: written to the data dir)",
            "kind": "email",
            "target": f"{DEMO_USER}@example.com",
            "send_resolved": True,
        },
    )
    trainer = HOSTS[0].name
    rule = alert_rules.save(
        team,
        {
            "name": "Idle H100s on the trainer (simulated data)",
            "kind": "threshold",
            "kpi": "idle_gpu_hours",
            "window": "1h",
            "host": trainer,
            "direction": "above",
            "fire_level": 3.5,
            "clear_level": 1,
            "include_simulated": True,
            "for_minutes": 0,
            "repeat_minutes": 0,
            "channels": [channel.id],
        },
    )
    alert_rules.save(
        team,
        {
            "name": "ML Platform monthly spend (simulated data)",
            "kind": "budget",
            "kpi": "cost_usd",
            "fire_level": 60000,
            "include_simulated": True,
            "channels": [channel.id],
        },
    )
    # The last three days, hour by hour, as beat evaluates it: a 6-hour block with half the
    # trainer's 8 H100s idle or more (55 % of the blocks) fires the rule, a busy one resolves
    # it (12 blocks: 0.45^12, one in 14,000, that none fires).
    first = floor_hour(dt.datetime.fromtimestamp(end - 3 * 86400, dt.UTC))
    last = floor_hour(dt.datetime.fromtimestamp(end, dt.UTC))
    hour = first
    while hour <= last:
        alert_evaluate.run(rule, now=hour + dt.timedelta(minutes=2))
        rule.refresh_from_db()
        hour += rollup.HOUR
    alert_notify.deliver(channel)


def _benchmarks(team: Team, end: float) -> None:
    """Nightly runs of the chat model's benchmark on main for three weeks; one commit makes
    each reply cost 14 % more energy (a batching change), which the history's change point
    shows. Simulated runs: the CI gate itself never passes or fails simulated data."""
    if BenchmarkRun.objects.filter(team=team).exists():
        return
    for day in range(21, 0, -1):
        started = end - day * 86400
        regressed = day <= 8
        for_day = 24.0 * (1.14 if regressed else 1.0)
        samples = []
        for i in range(10):
            noise = 1 + 0.03 * (unit(7, day, i, 1) - 0.5)
            j = for_day * noise
            samples.append(
                {
                    "role": "head",
                    "index": i,
                    "count": 2000,
                    "wall_s": 60.0,
                    "gpu_energy_j": j * 2000,
                    "energy_per_inference_j": j,
                    "throughput_per_s": 33.3,
                    "avg_power_w": j * 2000 / 60.0,
                    "gpu_util_pct": 78.0,
                    "p99_ms": 2400.0 * noise,
                    "energy_method": "counter",
                }
            )
        benchmark_runs.store_run(
            team,
            {
                "run_id": str(uuid.UUID(int=day + (7 << 64))),
                "workload": CHAT_WORKLOAD,
                "source": "simulated",
                "commit": f"{int(unit(7, day) * 2**40):010x}",
                "branch": "main",
                "started_at": started,
                "command": "greenops-agent bench -- python bench/chat_llm.py (simulated)",
                "labels": {
                    "data": "simulated demo run",
                    **({"change": "larger decode batches (regressed)"} if day == 8 else {}),
                },
                "hardware": {"gpus": "4x L40S", "instance_type": "g6e.12xlarge"},
                "hardware_key": "g6e.12xlarge/4xL40S",
                "samples": samples,
            },
            posted_by="demo (simulated)",
        )
