"""Which GPUs a workload is seen running on, beside the GPUs configured for it.

The agent reports, about once a minute, who holds each GPU (greenops.telemetry.models.GpuProcess:
NVML compute processes with their GPU memory, or dcgm-exporter's Kubernetes pods); each host
keeps only its latest snapshot. A workload's matching rules (Workload.matches) pick its
processes out of the snapshots of the team's own hosts -- never another team's, whatever the
rule says. Nothing here changes the accounting: the configured GPUs stay what costs and energy
are booked on until someone adds a seen GPU through the audited edit.

A host whose last report is older than STALE_AFTER says so: its snapshot no longer tells what
runs there, so a configured GPU on it is "unknown", not "nothing running".
"""

from __future__ import annotations

import datetime as dt
from dataclasses import dataclass, field

from django.db.models import Max
from django.utils import timezone

from greenops.telemetry.models import Gpu, GpuProcess, Host, HostSample
from greenops.workloads.models import Workload

# Snapshots come once a minute (collectors/host_activity.py PROCESS_EVERY x 15 s): five missed
# in a row means the host (or its agent's host samples) stopped reporting.
STALE_AFTER = dt.timedelta(minutes=5)


@dataclass
class HostReport:
    """What is known about one host's latest process snapshot."""

    host: Host
    snapshot_at: dt.datetime | None  # the process rows' time; None: no process in the snapshot
    reported_at: dt.datetime | None  # newest of snapshot and host samples; None: never
    stale: bool


@dataclass
class GpuRow:
    gpu: Gpu
    report: HostReport
    processes: list[GpuProcess] = field(default_factory=list)

    @property
    def memory_mib(self) -> float | None:
        """GPU memory of the matching processes; None when none of them says (pods)."""
        known = [p.used_memory_mib for p in self.processes if p.used_memory_mib is not None]
        return sum(known) if known else None


@dataclass
class Seen:
    has_rule: bool
    ok: list[GpuRow]            # configured and seen running it
    not_configured: list[GpuRow]  # seen running it, not configured
    not_seen: list[GpuRow]      # configured, nothing matching in a fresh snapshot
    unknown: list[GpuRow]       # configured, host's snapshot stale or never reported
    stale_after_min: int


def host_reports(hosts, now: dt.datetime) -> dict[int, HostReport]:
    ids = [h.id for h in hosts]
    snap = dict(GpuProcess.objects.filter(host_id__in=ids).values("host_id")
                .annotate(t=Max("seen_at")).values_list("host_id", "t"))
    # An empty snapshot leaves no process row, so the host's last sample report says when it
    # was last heard from (processes travel in the same POST as its host samples).
    sampled = dict(HostSample.objects.filter(host_id__in=ids).values("host_id")
                   .annotate(t=Max("ts")).values_list("host_id", "t"))
    out = {}
    for h in hosts:
        times = [t for t in (snap.get(h.id), sampled.get(h.id)) if t is not None]
        reported = max(times) if times else None
        out[h.id] = HostReport(h, snap.get(h.id), reported,
                               reported is None or now - reported > STALE_AFTER)
    return out


def seen_gpus(workload: Workload, now: dt.datetime | None = None) -> Seen:
    now = now or timezone.now()
    team_id = workload.team_id
    hosts = list(Host.objects.filter(team_id=team_id).order_by("name"))
    reports = host_reports(hosts, now)
    configured = {g.id: g for g in workload.gpu_queryset().select_related("host")
                  .filter(host__team_id=team_id)}
    rows: dict[int, GpuRow] = {}
    if workload.has_match_rule:
        procs = (GpuProcess.objects.filter(host__team_id=team_id, gpu__host__team_id=team_id)
                 .select_related("gpu__host").order_by("gpu__host__name", "gpu__index", "pid",
                                                        "pod"))
        for p in procs:
            if workload.matches(p.name, p.namespace, p.pod):
                row = rows.setdefault(p.gpu_id, GpuRow(p.gpu, reports[p.gpu.host_id]))
                row.processes.append(p)

    def key(r: GpuRow):
        return (r.gpu.host.name, r.gpu.index)

    ok = sorted((r for gid, r in rows.items() if gid in configured), key=key)
    extra = sorted((r for gid, r in rows.items() if gid not in configured), key=key)
    missing = [GpuRow(g, reports[g.host_id]) for gid, g in configured.items() if gid not in rows]
    not_seen = sorted((r for r in missing if not r.report.stale), key=key)
    unknown = sorted((r for r in missing if r.report.stale), key=key)
    if not workload.has_match_rule:  # no rule: nothing can be said to be seen or not
        unknown, not_seen = sorted(missing, key=key), []
    return Seen(workload.has_match_rule, ok, extra, not_seen, unknown,
                int(STALE_AFTER.total_seconds() // 60))
