"""The GPU alternatives table (data/gpus.csv): published board power, memory, bandwidth and
dense tensor throughput of real GPU models, each row citing its source and the date it was
read. Shipped as data; nothing is fetched at run time.

An empty cell is "not published" and stays None: a figure the advisor needs and the table
lacks means no estimate for that GPU, never a guess. Dense figures: where a datasheet prints
"with sparsity" only, the dense figure is half of it (the row's note says so).
"""

from __future__ import annotations

import csv
from dataclasses import dataclass
from functools import cache
from pathlib import Path

from greenops.costs.models import InstanceType, Price, PriceOption
from greenops.telemetry.models import Host

TABLE = Path(__file__).resolve().parent / "data" / "gpus.csv"
MIB_PER_GB = 1024  # NVIDIA's "80 GB" is what NVML reports as about 80 GiB (81,559 MiB)


@dataclass(frozen=True)
class GpuSpec:
    model: str
    names: tuple[str, ...]  # as NVML reports it and as the price catalog names it
    board_power_w: float | None
    memory_gb: float | None
    memory_bandwidth_gb_s: float | None
    fp16_tensor_dense_tflops: float | None
    int8_tensor_dense_tops: float | None
    pcie_gb_s: float | None  # both directions together, as datasheets print it
    nvlink_gb_s: float | None  # all links, both directions; None: no NVLink
    source_url: str
    read_via: str
    retrieved: str
    note: str

    @property
    def memory_mib(self) -> float | None:
        return None if self.memory_gb is None else self.memory_gb * MIB_PER_GB

    def link_kib_s_each_way(self, link: str) -> float | None:
        """One direction of "pcie" or "nvlink" in NVML's and DCGM's unit (KiB/s)."""
        both = self.pcie_gb_s if link == "pcie" else self.nvlink_gb_s
        return None if both is None else both / 2 * 1e9 / 1024

    @property
    def pcie_kib_s_each_way(self) -> float | None:
        return self.link_kib_s_each_way("pcie")

    def capacity(self, resource: str) -> float | None:
        return {"compute": self.fp16_tensor_dense_tflops,
                "memory": self.memory_bandwidth_gb_s}[resource]


def _num(value: str) -> float | None:
    return float(value) if value.strip() else None


@cache
def table() -> tuple[GpuSpec, ...]:
    with TABLE.open(newline="") as f:
        return tuple(GpuSpec(
            model=row["model"], names=tuple(n.strip() for n in row["names"].split("|")),
            board_power_w=_num(row["board_power_w"]), memory_gb=_num(row["memory_gb"]),
            memory_bandwidth_gb_s=_num(row["memory_bandwidth_gb_s"]),
            fp16_tensor_dense_tflops=_num(row["fp16_tensor_dense_tflops"]),
            int8_tensor_dense_tops=_num(row["int8_tensor_dense_tops"]),
            pcie_gb_s=_num(row["pcie_gb_s"]), nvlink_gb_s=_num(row["nvlink_gb_s"]),
            source_url=row["source_url"],
            read_via=row["read_via"], retrieved=row["retrieved"], note=row["note"],
        ) for row in csv.DictReader(f))


def find(name: str | None) -> GpuSpec | None:
    """The row whose names include `name` (NVML's or the catalog's), case-insensitively."""
    if not name:
        return None
    key = name.strip().lower()
    return next((s for s in table() if key in (n.lower() for n in s.names)), None)


@dataclass(frozen=True)
class InstanceOffer:
    instance_type: str
    gpu_count: int
    usd_per_hour: float
    source: str


@dataclass(frozen=True)
class GpuOffer:
    """The catalog's instance types carrying one GPU model in a region and option."""

    spec: GpuSpec
    instances: tuple[InstanceOffer, ...]

    def cheapest(self, gpus: int) -> tuple[InstanceOffer, int, float]:
        """(instance type, how many of them, $ per hour) for at least `gpus` GPUs: whole
        instances only -- one GPU of an 8-GPU instance is not for rent."""
        return min(((o, -(-gpus // o.gpu_count), -(-gpus // o.gpu_count) * o.usd_per_hour)
                    for o in self.instances), key=lambda x: (x[2], x[0].instance_type))


PRICED_OPTIONS = (PriceOption.ON_DEMAND, PriceOption.SPOT)


def offers(host: Host) -> dict[str, GpuOffer]:
    """Per table model: the instance types with that GPU in the host's provider, region and
    purchase option. Only on-demand and spot hosts: commitments are priced per term and
    payment, which the alternative would not share."""
    if host.purchase_option not in PRICED_OPTIONS or not host.region:
        return {}
    provider = host.provider or "aws"
    types = {t.name: t for t in InstanceType.objects.filter(provider=provider)}
    found: dict[str, list[InstanceOffer]] = {}
    specs: dict[str, GpuSpec] = {}
    for price in Price.objects.filter(provider=provider, region=host.region,
                                      option=host.purchase_option, term_years__isnull=True):
        t = types.get(price.instance_type)
        spec = find(t.gpu_model) if t is not None and t.gpu_count else None
        if spec is None:
            continue
        specs[spec.model] = spec
        found.setdefault(spec.model, []).append(InstanceOffer(
            t.name, t.gpu_count, float(price.usd_per_hour),
            f"{price.source} (as of {price.as_of:%Y-%m-%d})"))
    return {model: GpuOffer(specs[model], tuple(sorted(rows, key=lambda o: o.instance_type)))
            for model, rows in found.items()}
