"""Kubernetes pods as workloads: each GPU-hour's joules, dollars and CO2e, split between the
pods that held the GPU.

The agent tells which pod and container holds each GPU (the kubelet's PodResources API,
collectors/podresources.py); greenops.telemetry.pod_hours turns the snapshots into seconds held
per pod and hour (GpuPodHour). ``rollup`` below prices every GPU-hour of a Kubernetes node once,
with the project's own accounting -- ``it_energy`` (GPU + the GPU's share of the host's CPU/RAM),
``carbon_of`` (PUE x grid intensity of that host and hour) and ``cost_of`` (the host's price
in force, its share per GPU) -- and gives each pod ``held_s / 3600`` of it. The rest of the
hour, when no pod held the GPU, is a row with an empty pod, so a node's rows add up to the
node's figures. Pages and the API read these rows (PodHour), never raw samples.

Who sees what: the team that owns the host sees every pod on it, with namespaces nobody mapped
shown as "unmapped namespace"; a team a namespace is mapped to (NamespaceTeam, set by the
host team's admins) sees that namespace's pods and nothing else of the host.
"""

from __future__ import annotations

import datetime as dt
from collections import defaultdict
from dataclasses import dataclass, field

from django.db import transaction
from django.db.models import Q

from greenops.carbon.accounting import cached_site_factors, carbon_of
from greenops.costs.accounting import cached_prices, cost_of
from greenops.energy import it_energy
from greenops.teams.models import Team
from greenops.telemetry.models import Gpu, GpuHour, GpuPodHour, Host
from greenops.units import j_to_kwh
from greenops.windows import HOUR, Window, floor_hour
from greenops.workloads.models import NamespaceTeam, PodHour, Workload

UNMAPPED = "unmapped namespace"
NO_POD = "no pod"
ROLLUP_LOOKBACK = dt.timedelta(hours=3)  # late snapshots and samples still change these hours


def _hours(host: Host, start: dt.datetime, end: dt.datetime) -> list[dt.datetime]:
    """The hours of [start, end) in which the node reported GPU energy or a pod held a GPU."""
    gpu_ids = list(Gpu.objects.filter(host=host).values_list("id", flat=True))
    measured = GpuHour.objects.filter(gpu_id__in=gpu_ids, bucket__gte=start, bucket__lt=end)
    held = GpuPodHour.objects.filter(host=host, bucket__gte=start, bucket__lt=end)
    return sorted(
        {floor_hour(b) for b in measured.values_list("bucket", flat=True)}
        | set(held.values_list("bucket", flat=True))
    )


def rollup(start: dt.datetime, end: dt.datetime, now: dt.datetime) -> int:
    """(Re)build the PodHour rows of every Kubernetes node (a host on which a pod was ever seen
    holding a GPU) for the finished hours of [start, end). Idempotent: each GPU-hour's rows are
    replaced. Returns the GPU-hours priced."""
    start, end = floor_hour(start), min(floor_hour(end), floor_hour(now))
    hosts = Host.objects.filter(id__in=GpuPodHour.objects.values("host_id").distinct())
    prices, factors = cached_prices(now), cached_site_factors()
    done = 0
    for host in hosts.order_by("id"):
        gpus = list(Gpu.objects.filter(host=host).select_related("host").order_by("index"))
        for bucket in _hours(host, start, end):
            held: dict[int, dict[tuple[str, str, str], float]] = defaultdict(dict)
            for r in GpuPodHour.objects.filter(host=host, bucket=bucket):
                held[r.gpu_id][(r.namespace, r.pod, r.container)] = r.held_s
            rows = []
            for gpu in gpus:
                rows.extend(_split(host, gpu, bucket, held.get(gpu.id, {}), prices, factors))
                done += 1
            with transaction.atomic():
                PodHour.objects.filter(host=host, bucket=bucket).delete()
                PodHour.objects.bulk_create(rows)
    return done


def _split(
    host: Host,
    gpu: Gpu,
    bucket: dt.datetime,
    held: dict[tuple[str, str, str], float],
    prices,
    factors,
) -> list[PodHour]:
    """One GPU-hour priced once, then shared: each pod gets held_s / 3600 of it."""
    energy = it_energy([gpu], bucket, bucket + HOUR)
    carbon = carbon_of(energy, factors)
    cost = cost_of(energy, prices, factors)
    total_s = sum(held.values())
    scale = min(1.0, 3600.0 / total_s) if total_s else 1.0  # never more than the hour
    parts = {key: s * scale for key, s in held.items()}
    parts[("", "", "")] = max(0.0, 3600.0 - sum(parts.values()))
    note = cost.source[:200]
    out = []
    for (namespace, pod, container), seconds in sorted(parts.items()):
        if seconds <= 0 and pod == "" and held:
            continue
        f = seconds / 3600.0
        out.append(
            PodHour(
                host=host,
                gpu=gpu,
                bucket=bucket,
                namespace=namespace,
                pod=pod,
                container=container,
                held_s=seconds,
                energy_j=f * energy.it_energy_j,
                facility_energy_j=f * carbon.facility_energy_j,
                co2e_kg=f * carbon.co2e_kg,
                cost_usd=None if cost.cost_usd is None else f * cost.cost_usd,
                cost_note=note,
                simulated=energy.simulated,
            )
        )
    return out


# --- what a team sees ---------------------------------------------------------------------


def visible(team: Team):
    """The PodHour rows ``team`` may see: all of its own hosts', and the mapped namespaces'
    rows on other teams' hosts."""
    q = Q(host__team=team)
    for owner_id, namespace in (
        NamespaceTeam.objects.filter(team=team)
        .exclude(owner=team)
        .values_list("owner_id", "namespace")
    ):
        q |= Q(host__team_id=owner_id, namespace=namespace)
    return PodHour.objects.filter(q)


@dataclass
class Figures:
    held_s: float = 0.0
    energy_j: float = 0.0
    facility_energy_j: float = 0.0
    co2e_kg: float = 0.0
    cost_usd: float | None = 0.0
    cost_reasons: set[str] = field(default_factory=set)
    simulated: bool = False

    def add(self, r: dict) -> None:
        self.held_s += r["held_s"]
        self.energy_j += r["energy_j"]
        self.facility_energy_j += r["facility_energy_j"]
        self.co2e_kg += r["co2e_kg"]
        self.simulated = self.simulated or r["simulated"]
        if r["cost_usd"] is None:
            # A sum with an unpriced part is unknown, not the priced part's total.
            self.cost_usd = None
            self.cost_reasons.add(r["cost_note"] or f"no price for {r['host__name']}")
        elif self.cost_usd is not None:
            self.cost_usd += r["cost_usd"]

    @property
    def gpu_hours(self) -> float:
        return self.held_s / 3600.0

    @property
    def energy_kwh(self) -> float:
        return j_to_kwh(self.energy_j)

    @property
    def cost_reason(self) -> str:
        return "; ".join(sorted(self.cost_reasons))

    def as_dict(self) -> dict:
        return {
            "gpu_hours": self.gpu_hours,
            "energy_j": self.energy_j,
            "energy_kwh": self.energy_kwh,
            "facility_energy_j": self.facility_energy_j,
            "co2e_kg": self.co2e_kg,
            "cost_usd": self.cost_usd,
            "cost_reason": self.cost_reason if self.cost_usd is None else None,
            "simulated": self.simulated,
        }


@dataclass
class PodRow:
    namespace: str
    pod: str
    container: str
    team: str  # the team the namespace is mapped to, UNMAPPED, or "" for the idle row
    workload: Workload | None
    figures: Figures

    @property
    def idle(self) -> bool:
        return not self.pod


@dataclass
class PodsPage:
    window: Window
    rows: list[PodRow]
    namespaces: list[tuple[str, str, Figures]]  # (namespace, team label, figures)
    total: Figures
    owns_nodes: bool


_FIELDS = (
    "host__team_id",
    "host__name",
    "namespace",
    "pod",
    "container",
    "held_s",
    "energy_j",
    "facility_energy_j",
    "co2e_kg",
    "cost_usd",
    "cost_note",
    "simulated",
)


def pods_page(team: Team, window: Window) -> PodsPage:
    """The team's pods over the window, their namespaces, and the total (which, for the team
    that owns the nodes, is the nodes' GPU total: the idle row included)."""
    mapped = {
        (owner, ns): name
        for owner, ns, name in NamespaceTeam.objects.values_list(
            "owner_id", "namespace", "team__name"
        )
    }
    workloads = list(Workload.objects.filter(team=team).exclude(match_namespace=""))
    rows: dict[tuple, PodRow] = {}
    spaces: dict[tuple[str, str], Figures] = {}
    total = Figures()
    qs = visible(team).filter(bucket__gte=window.start, bucket__lt=window.end)
    for r in qs.values(*_FIELDS).iterator(chunk_size=5000):
        owner = r["host__team_id"]
        label = "" if not r["pod"] else mapped.get((owner, r["namespace"]), UNMAPPED)
        key = (r["namespace"], r["pod"], r["container"], label)
        row = rows.get(key)
        if row is None:
            match = next(
                (w for w in workloads if r["pod"] and w.matches("", r["namespace"], r["pod"])), None
            )
            row = rows[key] = PodRow(
                r["namespace"], r["pod"], r["container"], label, match, Figures()
            )
        row.figures.add(r)
        if r["pod"]:
            spaces.setdefault((r["namespace"], label), Figures()).add(r)
        total.add(r)
    ordered = sorted(rows.values(), key=lambda p: (p.idle, p.namespace, p.pod, p.container))
    namespaces = [(ns, label, f) for (ns, label), f in sorted(spaces.items())]
    owns = Host.objects.filter(team=team, id__in=GpuPodHour.objects.values("host_id")).exists()
    return PodsPage(window, ordered, namespaces, total, owns)


def page_dict(page: PodsPage) -> dict:
    """The API's answer: the same rows as the page."""
    return {
        "window": page.window.as_dict(),
        "pods": [
            {
                "namespace": r.namespace or None,
                "pod": r.pod or None,
                "container": r.container or None,
                "team": r.team or None,
                "held_by": NO_POD if r.idle else "pod",
                "workload": r.workload.slug if r.workload else None,
                **r.figures.as_dict(),
            }
            for r in page.rows
        ],
        "namespaces": [
            {"namespace": ns, "team": label, **f.as_dict()} for ns, label, f in page.namespaces
        ],
        "total": page.total.as_dict(),
    }
