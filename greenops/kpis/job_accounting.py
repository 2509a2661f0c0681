"""A training job's energy, carbon and cost, stored on the job (workloads.TrainingJob).

A job's accounting covers its own GPUs from start to stop (or now, while it runs), read from
minute rollups, so it is exact to the minute: the minute buckets that begin inside the window
count. CPU and RAM come from the hosts' hourly figures, prorated by overlap. Composed here,
through kpis.measure, from the energy, carbon and cost owners; the workloads app below only
starts and stops jobs.
"""

from __future__ import annotations

import datetime as dt

from django.dispatch import receiver
from django.utils import timezone

from greenops.kpis.measure import Factors, measure_gpus
from greenops.workloads.models import TrainingJob
from greenops.workloads.signals import job_stopped


def account(job: TrainingJob, factors: Factors | None = None,
            now: dt.datetime | None = None) -> TrainingJob:
    """(Re)compute a job's energy, carbon and cost from rollups and store them on the job."""
    end = job.stopped_at or now or timezone.now()
    gpus = list(job.gpus.select_related("host"))
    t = measure_gpus(gpus, job.started_at, end, factors)
    if not t.gpu_minutes:
        # Nothing was measured, which is "unknown", not 0 kWh and $0.
        job.gpu_energy_j = job.cpu_ram_energy_j = job.facility_energy_j = None
        job.pue = job.intensity_g_per_kwh = job.co2e_kg = job.cost_usd = None
        job.pue_source = job.intensity_source = ""
        job.cost_source = ("no GPUs linked to the job" if not gpus else
                           "no telemetry from the job's GPUs while it ran")
        job.gpu_hours, job.simulated, job.accounted_at = 0.0, False, timezone.now()
        job.save()
        return job
    job.gpu_energy_j = t.gpu_energy_j
    job.cpu_ram_energy_j = t.cpu_ram_energy_j
    job.facility_energy_j = t.facility_energy_j
    job.pue, job.pue_source = t.pue, t.pue_source[:200]
    job.intensity_g_per_kwh, job.intensity_source = t.intensity_g_per_kwh, t.intensity_source[:300]
    job.co2e_kg = t.co2e_g / 1000
    job.cost_usd, job.cost_source = t.cost_usd, t.cost_source[:200]
    job.gpu_hours = t.gpu_minutes / 60
    job.simulated = t.simulated
    job.accounted_at = timezone.now()
    job.save()
    return job


def refresh_recent(now: dt.datetime, lookback: dt.timedelta,
                   factors: Factors | None = None) -> int:
    """Running jobs and jobs stopped within the lookback still receive late samples."""
    jobs = TrainingJob.objects.filter(stopped_at__isnull=True) | \
        TrainingJob.objects.filter(stopped_at__gte=now - lookback)
    n = 0
    for job in jobs.distinct():
        account(job, factors, now)
        n += 1
    return n


def refresh_overlapping(team_id: int, start: dt.datetime, end: dt.datetime, now: dt.datetime,
                        factors: Factors | None = None) -> int:
    """Account again every job of the team that ran during [start, end) (late telemetry)."""
    jobs = TrainingJob.objects.filter(team_id=team_id, started_at__lt=end).exclude(
        stopped_at__lt=start)
    n = 0
    for job in jobs:
        account(job, factors, now)
        n += 1
    return n


@receiver(job_stopped, dispatch_uid="kpis-account-stopped-job")
def _account_stopped(sender, job: TrainingJob, **kwargs) -> None:
    account(job)
