"""Training jobs: start and stop through the API, and the figures pages and the API show.

Their energy, carbon and cost are computed by greenops.kpis.job_accounting, which sits above
this app: stopping a job sends workloads.signals.job_stopped, and its receiver accounts the job
before stop_job returns.
"""

from __future__ import annotations

import datetime as dt
import math
import time

from django.db import IntegrityError, transaction

from greenops.errors import FieldError, invalid
from greenops.teams.models import Team
from greenops.telemetry.models import Gpu
from greenops.units import j_to_kwh
from greenops.workloads.models import TrainingJob, Workload
from greenops.workloads.signals import job_stopped

START_KEYS = {"workload", "name", "host", "gpus", "external_id", "started_at"}


def _ts(value, field: str, now_s: float) -> dt.datetime:
    if type(value) not in (int, float) or not math.isfinite(value) or value < 0:
        raise invalid(field, "must be Unix seconds (a number, not before 1970)")
    if value > now_s + 300:
        raise invalid(field, "is in the future; check the sender's clock")
    return dt.datetime.fromtimestamp(value, dt.UTC)


def resolve_gpus(team: Team, host_name, gpus, field: str = "gpus") -> list[Gpu] | None:
    """GPUs named by index (on `host`) or by UUID. None when none are named."""
    if gpus is None:
        if host_name is None:
            return None
        if not isinstance(host_name, str):
            raise invalid("host", "must be the name of one of the team's hosts")
        found = list(Gpu.objects.filter(host__team=team, host__name=host_name))
        if not found:
            raise invalid("host", "no host of this team with that name (and GPUs)")
        return found
    if not isinstance(gpus, list) or not gpus or len(gpus) > 1024:
        raise invalid(field, "must be a non-empty array of GPU indices or UUIDs")
    out = []
    for i, g in enumerate(gpus):
        if type(g) is int:
            if not isinstance(host_name, str):
                raise invalid("host", "is required when GPUs are given by index")
            gpu = Gpu.objects.filter(host__team=team, host__name=host_name, index=g).first()
        elif isinstance(g, str) and g:
            gpu = Gpu.objects.filter(host__team=team, uuid=g).first()
        else:
            raise invalid(f"{field}[{i}]", "must be a GPU index or UUID")
        if gpu is None:
            raise invalid(f"{field}[{i}]", "no such GPU on this team's hosts")
        out.append(gpu)
    return out


def start_job(team: Team, doc, started_by: str = "", now_s: float | None = None) -> TrainingJob:
    now_s = time.time() if now_s is None else now_s
    if not isinstance(doc, dict):
        raise invalid("", "the payload must be a JSON object")
    unknown = set(doc) - START_KEYS
    if unknown:
        raise invalid(sorted(unknown)[0], "is not a known field")
    slug = doc.get("workload")
    workload = Workload.objects.filter(team=team, slug=slug).first() if isinstance(slug, str) \
        else None
    if workload is None:
        raise invalid("workload", "must be the slug of a workload of this team")
    name = doc.get("name")
    if not isinstance(name, str) or not name.strip() or len(name) > 200:
        raise invalid("name", "must be a non-empty string of at most 200 characters")
    external_id = doc.get("external_id", "")
    if not isinstance(external_id, str) or len(external_id) > 100:
        raise invalid("external_id", "must be a string of at most 100 characters")
    started_at = _ts(doc["started_at"], "started_at", now_s) if "started_at" in doc else \
        dt.datetime.fromtimestamp(now_s, dt.UTC)
    gpus = resolve_gpus(team, doc.get("host"), doc.get("gpus"))
    if gpus is None:
        gpus = list(workload.gpu_queryset())
    if not gpus:
        raise invalid("gpus", "the workload has no hosts or GPUs linked: link some to it, or "
                      "name the job's host or GPUs")
    if external_id:
        existing = TrainingJob.objects.filter(team=team, external_id=external_id).first()
        if existing is not None:
            return existing
    try:
        with transaction.atomic():
            job = TrainingJob.objects.create(
                team=team, workload=workload, name=name.strip(), external_id=external_id,
                started_at=started_at, started_by=started_by[:100],
            )
            job.gpus.set(gpus)
    except IntegrityError:  # a retried start raced the first one
        return TrainingJob.objects.get(team=team, external_id=external_id)
    return job


def stop_job(job: TrainingJob, doc=None, now_s: float | None = None) -> TrainingJob:
    """Stop once; stopping a stopped job is a no-op that returns it unchanged."""
    now_s = time.time() if now_s is None else now_s
    doc = doc or {}
    if not isinstance(doc, dict) or set(doc) - {"stopped_at"}:
        raise invalid(sorted(set(doc) - {"stopped_at"})[0] if isinstance(doc, dict) else "",
                      "is not a known field")
    stopped_at = _ts(doc["stopped_at"], "stopped_at", now_s) if "stopped_at" in doc else \
        dt.datetime.fromtimestamp(now_s, dt.UTC)
    if stopped_at < job.started_at:
        raise invalid("stopped_at", "is before the job started")
    if TrainingJob.objects.filter(id=job.id, stopped_at__isnull=True).update(
            stopped_at=stopped_at):
        job.stopped_at = stopped_at
    else:
        job.refresh_from_db()
        return job
    job_stopped.send(sender=TrainingJob, job=job)  # kpis.job_accounting accounts it
    return job


def summary(job: TrainingJob) -> dict:
    """The job's figures for pages and the API."""
    return {
        "id": job.id, "name": job.name, "workload": job.workload.slug,
        "started_at": job.started_at.isoformat(),
        "stopped_at": job.stopped_at.isoformat() if job.stopped_at else None,
        "running": job.running, "time_to_train_s": job.duration_s(),
        "gpus": [{"host": g.host.name, "index": g.index, "uuid": g.uuid}
                 for g in job.gpus.select_related("host")],
        "gpu_hours": job.gpu_hours,
        "gpu_energy_kwh": j_to_kwh(job.gpu_energy_j),
        "cpu_ram_energy_kwh": j_to_kwh(job.cpu_ram_energy_j),
        "energy_kwh": None if job.gpu_energy_j is None else
        j_to_kwh(job.gpu_energy_j + (job.cpu_ram_energy_j or 0.0)),
        "facility_energy_kwh": j_to_kwh(job.facility_energy_j),
        "pue": job.pue, "pue_source": job.pue_source,
        "intensity_g_per_kwh": job.intensity_g_per_kwh, "intensity_source": job.intensity_source,
        "co2e_kg": job.co2e_kg, "cost_usd": job.cost_usd,
        "cost_source": job.cost_source or ("no price" if job.accounted_at else ""),
        "simulated": job.simulated,
        "accounted_at": job.accounted_at.isoformat() if job.accounted_at else None,
    }


def job_for_caller(team: Team, job_id: int) -> TrainingJob:
    job = TrainingJob.objects.filter(team=team, id=job_id).select_related("workload").first()
    if job is None:
        raise FieldError(404, "not_found", "id", "no training job with this id in your team")
    return job
