"""Inference counts as they arrive (raw deltas) and the hourly/daily KPI rollups pages read.

Raw inference windows are deltas since the sender's previous window, kept as sent (latency
histograms in their source's own bounds, converted to ms: greenops.kpis.histogram). The KPI
beat task folds them, with GPU energy from telemetry rollups and CPU/RAM energy from the carbon
app, into KpiRollup rows; every carbon figure there keeps the PUE and grid intensity (and their
sources) it used.
"""

from __future__ import annotations

import uuid

from django.db import models
from django.utils import timezone

from greenops.teams.models import Team
from greenops.workloads.models import Workload


class InferenceBatch(models.Model):
    """One POST /api/v1/inference. Its id makes a resend a no-op."""

    id = models.UUIDField(primary_key=True, default=uuid.uuid4)
    team = models.ForeignKey(Team, models.CASCADE, related_name="+")
    received_at = models.DateTimeField(default=timezone.now, db_index=True)
    sender = models.CharField(max_length=100, blank=True)
    windows = models.PositiveIntegerField()


class InferenceWindow(models.Model):
    """Counts over one sender window ending at `end`: deltas, never running totals."""

    batch = models.ForeignKey(InferenceBatch, models.CASCADE, related_name="items")
    workload = models.ForeignKey(Workload, models.CASCADE, related_name="+")
    # Where the window began (the agent's previous good scrape); null from senders that do not
    # say (older agents, the client library).
    start = models.DateTimeField(null=True)
    end = models.DateTimeField()
    requests = models.BigIntegerField()
    success = models.BigIntegerField(null=True)
    failure = models.BigIntegerField(null=True)
    tokens = models.BigIntegerField(null=True)  # generated (output) tokens
    prompt_tokens = models.BigIntegerField(null=True)
    # GPU energy the inference server counted itself (Triton nv_energy_consumption), shown
    # beside GreenOps' own NVML figure as a cross-check; never used for accounting.
    server_energy_j = models.FloatField(null=True)
    latency_sum_ms = models.FloatField(null=True)
    # How many latencies latency_sum_ms adds up: the mean is sum / n. Not always the histogram's
    # total: Triton's default metrics give only a duration sum and a count, no buckets.
    latency_n = models.BigIntegerField(default=0)
    latency_buckets = models.JSONField(default=dict)  # histogram.to_json form
    # Phases and token timings beside the request latency: {name: {"sum_ms", "n", "hist"}},
    # names in greenops.kpis.inference.TIMING_NAMES (greenops.kpis.timings merges them).
    timings = models.JSONField(default=dict)

    class Meta:
        indexes = [models.Index(fields=["workload", "end"], name="inference_window_wl_end")]


class Period(models.TextChoices):
    HOUR = "hour"
    DAY = "day"


class KpiRollup(models.Model):
    """Sums for one workload (or, with workload null, the whole team) over one hour or day.

    Sums and counts only, so rows of any range merge exactly; derived KPIs (J per inference,
    p99, ...) are computed from merged rows by greenops.kpis.metrics.
    """

    team = models.ForeignKey(Team, models.CASCADE, related_name="+")
    workload = models.ForeignKey(Workload, models.CASCADE, null=True, blank=True,
                                 related_name="+")
    period = models.CharField(max_length=4, choices=Period.choices)
    bucket = models.DateTimeField()
    # Inference
    requests = models.BigIntegerField(default=0)
    success = models.BigIntegerField(default=0)
    failure = models.BigIntegerField(default=0)
    tokens = models.BigIntegerField(null=True)
    # Requests in windows that reported tokens: energy per token uses only their share of energy.
    token_requests = models.BigIntegerField(default=0)
    latency_sum_ms = models.FloatField(default=0)
    latency_n = models.BigIntegerField(default=0)
    latency_buckets = models.JSONField(default=dict)
    prompt_tokens = models.BigIntegerField(null=True)
    server_energy_j = models.FloatField(null=True)  # as the inference server counted it
    timings = models.JSONField(default=dict)  # as InferenceWindow.timings, merged
    # Seconds the bucket's counting windows covered (their union; a window belongs to the
    # bucket holding its end). Rates divide by this, not by the bucket's length. Null: some
    # window had no start, so the time its requests were counted over is unknown.
    measured_s = models.FloatField(null=True, default=0.0)
    # GPU telemetry
    util_sum = models.FloatField(default=0)
    util_n = models.BigIntegerField(default=0)
    gpu_minutes = models.IntegerField(default=0)  # GPU-minutes with at least one sample
    gpu_energy_j = models.FloatField(default=0)
    cpu_ram_energy_j = models.FloatField(default=0)
    cpu_ram_method = models.CharField(max_length=200, blank=True)
    # Facility energy and carbon: PUE and intensity applied once, per host, then summed. With
    # several hosts, pue and intensity are the energy-weighted effective values.
    facility_energy_j = models.FloatField(default=0)
    pue = models.FloatField(null=True)
    pue_source = models.CharField(max_length=300, blank=True)
    intensity_g_per_kwh = models.FloatField(null=True)
    intensity_source = models.CharField(max_length=300, blank=True)
    co2e_g = models.FloatField(default=0)
    cost_usd = models.FloatField(null=True)  # null: no price known for some GPU-hours
    # Team rows: the same three figures for the GPUs of the team's inference workloads only
    # (counted once), which per-inference KPIs divide; null on workload rows (their own
    # figures are already their inference figures) and on rows from before this existed.
    inference_energy_j = models.FloatField(null=True)
    inference_co2e_g = models.FloatField(null=True)
    inference_cost_usd = models.FloatField(null=True)
    cost_source = models.CharField(max_length=300, blank=True)
    # Team rows: the team's hosts with a GPU sample in the bucket (host-hours measured; a host
    # with 8 GPUs counts once per hour), and how many of those were measured outside the host's
    # enrollment (before the hour it was created in, from the time it was removed: a replayed
    # spool), which count as hours of the period too (queries.host_hours). Kept here so the
    # coverage of a period reads one row per bucket instead of every GPU-hour. Null on workload
    # rows.
    hosts_measured = models.IntegerField(null=True)
    hosts_unenrolled = models.IntegerField(null=True)
    simulated = models.BooleanField(default=False)
    computed_at = models.DateTimeField(default=timezone.now)

    class Meta:
        ordering = ["bucket"]
        # Two partial constraints rather than nulls_distinct=False, which SQLite (the embedded
        # default) does not support and Django would silently drop there.
        constraints = [
            models.UniqueConstraint(fields=["team", "workload", "period", "bucket"],
                                    condition=models.Q(workload__isnull=False),
                                    name="kpi_rollup_key"),
            models.UniqueConstraint(fields=["team", "period", "bucket"],
                                    condition=models.Q(workload__isnull=True),
                                    name="kpi_rollup_team_key"),
        ]
        indexes = [models.Index(fields=["workload", "period", "bucket"], name="kpi_wl_bucket")]


class RollupCursor(models.Model):
    """How far the KPI task has read received inference batches (by received_at)."""

    name = models.CharField(max_length=50, unique=True)
    position = models.DateTimeField()
