"""IT energy of a set of GPUs over a window: the one owner of "how many joules did this use".

IT energy = the GPUs' own energy + the linked share of each host's CPU and RAM energy (the set's
GPUs on that host / all the host's GPUs), measured at the host, before PUE. Everything is read
from rollups (GpuHour for hour-aligned windows, GpuMinute otherwise; telemetry's
HostEnergyHour for CPU/RAM, prorated by overlap) and kept per host and hour, so that carbon
(greenops.carbon.accounting.carbon_of) and cost (greenops.costs.accounting.cost_of) can apply
the factors and prices in force in each hour.
"""

from __future__ import annotations

import datetime as dt
from dataclasses import dataclass, field

from django.db.models import Count, Max, Sum

from greenops.telemetry.models import Gpu, GpuHour, GpuMinute, Host, HostEnergyHour
from greenops.units import J_PER_KWH
from greenops.windows import floor_hour  # re-exported: costs.accounting imports it here

HOUR = dt.timedelta(hours=1)


def overlap(bucket: dt.datetime, start: dt.datetime, end: dt.datetime) -> float:
    """Fraction of the hour starting at `bucket` that lies inside [start, end)."""
    lo, hi = max(bucket, start), min(bucket + HOUR, end)
    return max(0.0, (hi - lo).total_seconds()) / HOUR.total_seconds()


def hour_aligned(start: dt.datetime, end: dt.datetime) -> bool:
    return start == floor_hour(start) and end == floor_hour(end)


@dataclass
class HourEnergy:
    """One host in one hour: the set's share of it."""

    gpu_energy_j: float = 0.0
    cpu_ram_energy_j: float = 0.0

    @property
    def it_energy_j(self) -> float:
        return self.gpu_energy_j + self.cpu_ram_energy_j


@dataclass
class ItEnergy:
    """IT energy of a set of GPUs over [start, end), per (host id, hour bucket)."""

    start: dt.datetime
    end: dt.datetime
    hosts: dict[int, Host] = field(default_factory=dict)
    linked_gpus: dict[int, int] = field(default_factory=dict)  # host id -> the set's GPUs on it
    host_gpu_count: dict[int, int] = field(default_factory=dict)  # host id -> all its GPUs
    hours: dict[tuple[int, dt.datetime], HourEnergy] = field(default_factory=dict)
    util_sum: float = 0.0
    util_n: int = 0
    simulated: bool = False
    cpu_ram_method: str = ""
    # The set's GPU ids: gpu_minutes_by_host is counted from them on first use.
    gpu_ids: list[int] = field(default_factory=list)
    _gpu_minutes_by_host: dict[int, int] | None = field(default=None, repr=False)

    @property
    def gpu_minutes_by_host(self) -> dict[int, int]:
        """host id -> minute buckets in which one of the set's GPUs on that host reported.
        Counted from minute rollups when first asked (the KPIs ask; a cost never does, and at
        1,000 GPUs x 30 days it is a count over 43 million rows)."""
        if self._gpu_minutes_by_host is None:
            minutes = GpuMinute.objects.filter(gpu_id__in=self.gpu_ids, bucket__gte=self.start,
                                               bucket__lt=self.end).values("gpu__host_id")
            self._gpu_minutes_by_host = dict(
                minutes.annotate(n=Count("*")).values_list("gpu__host_id", "n")) \
                if self.gpu_ids else {}
        return self._gpu_minutes_by_host

    @property
    def gpu_minutes(self) -> int:
        return sum(self.gpu_minutes_by_host.values())

    def hour(self, host_id: int, bucket: dt.datetime) -> HourEnergy:
        return self.hours.setdefault((host_id, bucket), HourEnergy())

    def share(self, host_id: int) -> float:
        """The set's share of a host: its GPUs there over the host's GPU count."""
        return self.linked_gpus.get(host_id, 0) / max(self.host_gpu_count.get(host_id, 1), 1)

    @property
    def gpu_energy_j(self) -> float:
        return sum(h.gpu_energy_j for h in self.hours.values())

    @property
    def cpu_ram_energy_j(self) -> float:
        return sum(h.cpu_ram_energy_j for h in self.hours.values())

    @property
    def it_energy_j(self) -> float:
        return self.gpu_energy_j + self.cpu_ram_energy_j

    @property
    def it_energy_kwh(self) -> float:
        return self.it_energy_j / J_PER_KWH

    def host_energy_j(self, host_id: int) -> float:
        return sum(h.it_energy_j for (hid, _), h in self.hours.items() if hid == host_id)


def it_energy(gpus: list[Gpu], start: dt.datetime, end: dt.datetime) -> ItEnergy:
    """GPU energy, utilisation and the CPU/RAM share of these GPUs over [start, end).
    Hour-aligned windows read hour rollups, others minute rollups."""
    out = ItEnergy(start, end)
    if not gpus:
        return out
    gpu_host = {g.id: g.host for g in gpus}
    out.hosts = {h.id: h for h in gpu_host.values()}
    for g in gpus:
        out.linked_gpus[g.host_id] = out.linked_gpus.get(g.host_id, 0) + 1
    out.host_gpu_count = dict(
        Gpu.objects.filter(host_id__in=list(out.hosts)).values("host_id").annotate(n=Count("*"))
        .values_list("host_id", "n")
    )
    model = GpuHour if hour_aligned(start, end) else GpuMinute
    # Summed per host and bucket in the database: a month of 1,000 GPUs is 744,000 GPU-hours,
    # which cost tens of seconds as Python rows; per host-hour they are 8x fewer (a report,
    # a cost snapshot and the KPI rollup all read them).
    rows = (model.objects.filter(gpu_id__in=list(gpu_host), bucket__gte=start, bucket__lt=end)
            .values("gpu__host_id", "bucket")
            .annotate(e=Sum("energy_j"), us=Sum("util_sum"), un=Sum("util_n"),
                      sim=Max("simulated_samples"))
            .values_list("gpu__host_id", "bucket", "e", "us", "un", "sim")
            .order_by())
    for host_id, bucket, energy_j, util_sum, util_n, simulated in rows.iterator(
            chunk_size=5000):
        out.hour(host_id, floor_hour(bucket)).gpu_energy_j += energy_j or 0.0
        out.util_sum += util_sum or 0.0
        out.util_n += util_n or 0
        out.simulated = out.simulated or bool(simulated)
    out.gpu_ids = list(gpu_host)
    methods = set()
    cpu_ram = HostEnergyHour.objects.filter(
        host_id__in=list(out.hosts), bucket__gte=floor_hour(start), bucket__lt=end
    ).values_list("host_id", "bucket", "cpu_energy_j", "ram_energy_j", "cpu_method",
                  "ram_method", "simulated_samples")
    for host_id, bucket, cpu_j, ram_j, cpu_m, ram_m, simulated in cpu_ram:
        j = ((cpu_j or 0.0) + (ram_j or 0.0)) * out.share(host_id) * overlap(bucket, start, end)
        out.hour(host_id, bucket).cpu_ram_energy_j += j
        out.simulated = out.simulated or bool(simulated)
        methods.add(f"CPU {cpu_m}, RAM {ram_m}")
    out.cpu_ram_method = "; ".join(sorted(methods))
    return out

