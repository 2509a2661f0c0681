"""Which accelerator, how many replicas: two questions about inference services, answered from
what was measured (issue 33 item 4).

* `compare_accelerators`: the team's inference services that serve the same model
  (`Workload.served_model`) on different device models (what the device calls itself, NVML's
  name for an NVIDIA GPU), side by side in measured J, $ and g CO2e per inference -- the KPI
  rollups' figures, so the one cost model and the one carbon accounting -- and what moving each
  service's traffic to the cheapest and to the greenest would save per month at its measured
  request rate. A service with fewer than MIN_COMPARE_REQUESTS counted, or on several device
  models at once, is listed with the reason and not compared.
* `replicas`: for a service with a p99 target (`Workload.p99_target_ms`), the replicas its
  measured peak needs: per finished hour, the request rate (requests / the seconds counted),
  the replicas serving it (the workload's GPUs that reported that hour: one replica per GPU)
  and the hour's p99 (Prometheus' histogram_quantile over the hour's buckets,
  greenops.quantiles). The capacity of one replica at the target is the highest per-replica
  rate of an hour whose p99 met it (a demonstrated rate: the true capacity may be higher, so
  the count is an upper bound); the need is the peak hourly rate plus HEADROOM over that
  capacity. The surplus replicas' share of the measured month is what they cost
  (measure.scaled_effect: the same scaling as every advisor effect).
"""

from __future__ import annotations

import datetime as dt
import math
from dataclasses import dataclass, field

from django.db.models import Count

from greenops import windows
from greenops.advisor.measure import MONTH_S, Effect, Monthly, scaled_effect
from greenops.kpis import histogram, queries
from greenops.kpis.models import KpiRollup, Period
from greenops.telemetry.models import GpuHour
from greenops.workloads.models import Workload, WorkloadKind

MIN_COMPARE_REQUESTS = 1000  # fewer and a per-inference figure is mostly noise
MIN_P99_REQUESTS = 100  # an hour's p99 from fewer requests is its one or two slowest
HEADROOM = 0.2  # spare capacity above the peak hourly rate (bursts inside the hour)
SERVING_KINDS = (WorkloadKind.INFERENCE, WorkloadKind.BATCH)


# ---- Which accelerator ------------------------------------------------------------------


@dataclass(frozen=True)
class Served:
    """One service's measured per-inference figures over the window."""

    workload: Workload
    device: str  # the device model ("" none linked); several joined by " + "
    requests: int
    measured_s: float | None  # seconds the request counts covered
    coverage: str
    j_per_inference: float | None
    usd_per_inference: float | None
    co2e_g_per_inference: float | None
    simulated: bool
    unknown: str = ""  # why this service is not compared

    @property
    def requests_per_month(self) -> float | None:
        if not self.measured_s:
            return None
        return self.requests / self.measured_s * MONTH_S

    @property
    def usd_per_1k(self) -> float | None:
        return None if self.usd_per_inference is None else self.usd_per_inference * 1000

    @property
    def co2e_g_per_1k(self) -> float | None:
        return None if self.co2e_g_per_inference is None else self.co2e_g_per_inference * 1000


@dataclass(frozen=True)
class Move:
    """Moving one service's traffic to `to`: the monthly change at its measured rate
    (positive = saved). None where a figure of either side is unknown."""

    source: Served
    to: Served
    why: str  # "cheapest" or "greenest"
    usd_saved: float | None
    co2e_kg_saved: float | None
    kwh_saved: float | None

    @property
    def usd_saved_text(self) -> str:
        """"$1,555" or "−$778" (a minus before the sign, as people write it)."""
        if self.usd_saved is None:
            return ""
        v = round(self.usd_saved)
        return f"−${-v:,}" if v < 0 else f"${v:,}"


@dataclass
class Comparison:
    model: str
    rows: list[Served] = field(default_factory=list)
    cheapest: Served | None = None
    greenest: Served | None = None
    moves: list[Move] = field(default_factory=list)
    unknown: str = ""  # why nothing is compared

    @property
    def simulated(self) -> bool:
        return any(r.simulated for r in self.rows)


def device_models(workload: Workload) -> list[str]:
    return sorted({n for n in workload.gpu_queryset().values_list("name", flat=True) if n})


def served(workload: Workload, window: windows.Window) -> Served:
    start, end = window.start, window.end
    k = queries.kpis(
        workload.team,
        workload,
        start,
        end,
        Period.HOUR,
        queries.rows_by_day(workload.team, workload, start, end),
    )
    k = queries.workload_figures(workload, k)
    devices = device_models(workload)
    requests = int(k["requests"] or 0)
    usd_1k, g_1k = k["cost_per_1k_inferences_usd"], k["co2e_per_1k_inferences_g"]
    unknown = ""
    if not devices:
        unknown = "no device linked to the service"
    elif len(devices) > 1:
        unknown = (
            "served on several device models at once: its per-inference figures "
            "cannot be split by device"
        )
    elif requests < MIN_COMPARE_REQUESTS:
        unknown = (
            f"{requests:,} requests counted in the range; a comparison needs at least "
            f"{MIN_COMPARE_REQUESTS:,}"
        )
    elif k["energy_per_inference_j"] is None:
        unknown = k["unknown"].get("energy_per_inference_j", "no energy measured")
    return Served(
        workload=workload,
        device=" + ".join(devices),
        requests=requests,
        measured_s=k["measured_s"],
        coverage=k["coverage"],
        j_per_inference=k["energy_per_inference_j"],
        usd_per_inference=None if usd_1k is None else usd_1k / 1000,
        co2e_g_per_inference=None if g_1k is None else g_1k / 1000,
        simulated=bool(k["simulated"]),
        unknown=unknown,
    )


def _move(source: Served, to: Served, why: str) -> Move:
    per_month = source.requests_per_month

    def saved(a: float | None, b: float | None, scale: float) -> float | None:
        if a is None or b is None or per_month is None:
            return None
        return (a - b) * per_month * scale

    return Move(
        source,
        to,
        why,
        usd_saved=saved(source.usd_per_inference, to.usd_per_inference, 1.0),
        co2e_kg_saved=saved(source.co2e_g_per_inference, to.co2e_g_per_inference, 1 / 1000),
        kwh_saved=saved(source.j_per_inference, to.j_per_inference, 1 / 3.6e6),
    )


def compare_accelerators(workload: Workload, window: windows.Window) -> Comparison | None:
    """The services of the workload's team that serve its model; None when it names none."""
    model = workload.served_model.strip()
    if not model or workload.kind not in SERVING_KINDS:
        return None
    services = Workload.objects.filter(
        team_id=workload.team_id, served_model=model, kind__in=SERVING_KINDS
    ).order_by("name")
    c = Comparison(model, [served(w, window) for w in services])
    ok = [r for r in c.rows if not r.unknown]
    if len({r.device for r in ok}) < 2:
        c.unknown = (
            f"“{model}” is measured on {len({r.device for r in ok})} device model(s) "
            "with enough requests; a comparison needs two"
        )
        return c
    priced = [r for r in ok if r.usd_per_inference is not None]
    c.cheapest = min(priced, key=lambda r: (r.usd_per_inference, r.workload.name), default=None)
    carbon = [r for r in ok if r.co2e_g_per_inference is not None]
    c.greenest = min(carbon, key=lambda r: (r.co2e_g_per_inference, r.workload.name), default=None)
    for best, why in ((c.cheapest, "cheapest"), (c.greenest, "greenest")):
        if best is None:
            continue
        c.moves.extend(_move(r, best, why) for r in ok if r.device != best.device)
    return c


# ---- How many replicas ------------------------------------------------------------------


@dataclass(frozen=True)
class HourLoad:
    bucket: dt.datetime
    requests: int
    rate_per_s: float
    replicas: int
    p99_ms: float | None  # None: too few requests for a p99, or no histogram
    p99_above: bool  # the p99 lies past the histogram's highest bound (">= p99_ms")
    meets: bool | None  # p99 <= target; None: not known

    @property
    def per_replica_per_s(self) -> float:
        return self.rate_per_s / self.replicas


@dataclass
class ReplicaAdvice:
    target_ms: float
    name: str  # the Deployment the HPA snippet scales (the workload's slug)
    hours: list[HourLoad] = field(default_factory=list)
    replicas_now: int = 0
    capacity_per_s: float | None = None  # one replica at the target (demonstrated)
    capacity_hour: HourLoad | None = None
    peak: HourLoad | None = None
    low: HourLoad | None = None
    needed: int | None = None
    min_replicas: int | None = None
    surplus: int | None = None
    effect: Effect | None = None  # the surplus's month (negative: what removing it saves)
    unknown: str = ""
    skipped_hours: list[str] = field(default_factory=list)
    headroom: float = HEADROOM

    @property
    def per_pod_per_s(self) -> float | None:
        """The per-pod rate to scale out at: the capacity with the headroom kept free."""
        return None if self.capacity_per_s is None else self.capacity_per_s / (1 + self.headroom)

    @property
    def hpa_yaml(self) -> str:
        if self.needed is None or self.per_pod_per_s is None:
            return ""
        return hpa_yaml(self.name, self.min_replicas or 1, self.needed, self.per_pod_per_s)


def hpa_yaml(name: str, min_replicas: int, max_replicas: int, per_pod_per_s: float) -> str:
    """An autoscaling/v2 HorizontalPodAutoscaler scaling on requests per second per pod (a Pods
    metric a metrics adapter such as prometheus-adapter serves)."""
    return (
        "apiVersion: autoscaling/v2\n"
        "kind: HorizontalPodAutoscaler\n"
        f"metadata:\n  name: {name}\n"
        "spec:\n"
        f"  scaleTargetRef:\n    apiVersion: apps/v1\n    kind: Deployment\n    name: {name}\n"
        f"  minReplicas: {min_replicas}\n"
        f"  maxReplicas: {max_replicas}\n"
        "  metrics:\n"
        "  - type: Pods\n"
        "    pods:\n"
        "      metric:\n"
        "        name: requests_per_second  # served by your metrics adapter\n"
        "      target:\n"
        "        type: AverageValue\n"
        f'        averageValue: "{math.floor(per_pod_per_s * 1000)}m"  '
        f"# {per_pod_per_s:.2f} req/s per pod\n"
    )


def hour_loads(
    workload: Workload, window: windows.Window, target_ms: float, skipped: list[str]
) -> list[HourLoad]:
    gpu_ids = list(workload.gpu_queryset().values_list("id", flat=True))
    replicas = {
        r["bucket"]: r["n"]
        for r in GpuHour.objects.filter(
            gpu_id__in=gpu_ids, bucket__gte=window.start, bucket__lt=window.end, samples__gt=0
        )
        .values("bucket")
        .annotate(n=Count("gpu_id"))
    }
    out = []
    for row in KpiRollup.objects.filter(
        workload=workload,
        period=Period.HOUR,
        bucket__gte=window.start,
        bucket__lt=window.end,
        requests__gt=0,
    ).order_by("bucket"):
        when = f"{row.bucket:%Y-%m-%d %H:00}"
        if not row.measured_s:
            skipped.append(f"{when}: the seconds its requests were counted over are unknown")
            continue
        n = replicas.get(row.bucket, 0)
        if not n:
            skipped.append(f"{when}: none of the service's GPUs reported")
            continue
        p99 = above = None
        if row.requests >= MIN_P99_REQUESTS and histogram.total(row.latency_buckets):
            p99 = histogram.quantile_ms(row.latency_buckets, 0.99)
            above = histogram.above_bounds(row.latency_buckets, 0.99)
        if p99 is None:
            meets = None
        elif above:  # the p99 is somewhere above p99_ms: it meets nothing at or below it
            meets = False if target_ms <= p99 else None
        else:
            meets = p99 <= target_ms
        out.append(
            HourLoad(
                row.bucket, row.requests, row.requests / row.measured_s, n, p99, bool(above), meets
            )
        )
    return out


def replicas(workload: Workload, window: windows.Window, m: Monthly | None) -> ReplicaAdvice | None:
    """The replica advice of a service with a p99 target; None without a target. `m`: the
    measured month (measure.monthly) the surplus's cost is a share of; None: not enough
    measured (its cost is then unknown with the reason)."""
    if workload.p99_target_ms is None or workload.kind not in SERVING_KINDS:
        return None
    a = ReplicaAdvice(target_ms=workload.p99_target_ms, name=workload.slug)
    a.replicas_now = workload.gpu_queryset().count()
    a.hours = hour_loads(workload, window, a.target_ms, a.skipped_hours)
    if not a.hours:
        a.unknown = "no finished hour with counted requests and reporting GPUs in the range"
        return a
    a.peak = max(a.hours, key=lambda h: (h.rate_per_s, h.bucket))
    a.low = min(a.hours, key=lambda h: (h.rate_per_s, h.bucket))
    met = [h for h in a.hours if h.meets]
    if not met:
        known = sum(h.meets is not None for h in a.hours)
        a.unknown = (
            f"no hour met the {a.target_ms:g} ms p99 target ({known} of "
            f"{len(a.hours)} hours had a p99 from at least {MIN_P99_REQUESTS} "
            "requests): the capacity of a replica at the target is not known"
        )
        return a
    a.capacity_hour = max(met, key=lambda h: (h.per_replica_per_s, h.bucket))
    a.capacity_per_s = a.capacity_hour.per_replica_per_s
    a.needed = max(1, math.ceil(a.peak.rate_per_s * (1 + HEADROOM) / a.capacity_per_s))
    a.min_replicas = max(1, math.ceil(a.low.rate_per_s * (1 + HEADROOM) / a.capacity_per_s))
    a.surplus = a.replicas_now - a.needed
    if a.surplus <= 0:
        return a
    share = a.surplus / a.replicas_now
    method = (
        f"{a.surplus} of {a.replicas_now} replicas ({share * 100:.0f} %) of the measured "
        "month's energy, CO2e and cost. An upper bound on the saving: the remaining "
        "replicas draw more when busier."
    )
    if m is None:
        a.effect = Effect(unknown="too little GPU time measured in the range for its month")
    else:
        a.effect = scaled_effect(
            m,
            -share,
            None if m.usd is None else -m.usd * share,
            method=method,
            unknown="" if m.usd is not None else f"cost unknown: {m.usd_problem}",
        )
    return a


# ---- JSON (the API) ---------------------------------------------------------------------

def _figures(pairs: dict[str, float | None], why: dict[str, str]) -> dict:
    """Figures with an `unknown` map naming why each None is None (never 0)."""
    return {**pairs, "unknown": {k: why.get(k, "not measured") for k, v in pairs.items()
                                 if v is None}}


def comparison_json(c: Comparison | None, workload: Workload) -> dict:
    if c is None:
        return {"accelerators": None, "accelerators_unknown": (
            "the workload names no served model" if workload.kind in SERVING_KINDS
            else "not an inference service")}
    rows = []
    for r in c.rows:
        why = dict.fromkeys(("j_per_inference", "usd_per_1k_inferences",
                             "co2e_g_per_1k_inferences", "requests_per_month"), r.unknown)
        if not r.unknown:
            why.update(usd_per_1k_inferences="no price for some of the hours",
                       requests_per_month="the seconds the requests were counted over are "
                                          "unknown")
        rows.append({"workload": r.workload.slug, "device": r.device, "requests": r.requests,
                     "measured_s": r.measured_s, "coverage": r.coverage,
                     "simulated": r.simulated, "compared": not r.unknown,
                     **_figures({"j_per_inference": r.j_per_inference,
                                 "usd_per_1k_inferences": r.usd_per_1k,
                                 "co2e_g_per_1k_inferences": r.co2e_g_per_1k,
                                 "requests_per_month": r.requests_per_month}, why)})
    moves = [{"from": m.source.workload.slug, "to": m.to.workload.slug, "why": m.why,
              **_figures({"usd_saved_per_month": m.usd_saved,
                          "kwh_saved_per_month": m.kwh_saved,
                          "co2e_kg_saved_per_month": m.co2e_kg_saved},
                         {"usd_saved_per_month": "no price for one side"})} for m in c.moves]
    return {"accelerators": {
        "model": c.model, "unknown": c.unknown or None, "rows": rows,
        "cheapest": c.cheapest.workload.slug if c.cheapest else None,
        "greenest": c.greenest.workload.slug if c.greenest else None, "moves": moves,
        "min_requests": MIN_COMPARE_REQUESTS}}


def replicas_json(a: ReplicaAdvice | None, workload: Workload) -> dict:
    if a is None:
        return {"replicas": None, "replicas_unknown": (
            "the workload has no p99 target" if workload.kind in SERVING_KINDS
            else "not an inference service")}
    effect = a.effect
    surplus = None
    if effect is not None:
        surplus = _figures({"kwh_per_month": effect.kwh_saved,
                            "co2e_kg_per_month": effect.co2e_kg_saved,
                            "usd_per_month": effect.usd_saved},
                           dict.fromkeys(("kwh_per_month", "co2e_kg_per_month",
                                          "usd_per_month"), effect.unknown))
        surplus["method"] = effect.method
    return {"replicas": {
        "p99_target_ms": a.target_ms, "unknown": a.unknown or None,
        "replicas_now": a.replicas_now, "needed": a.needed, "min_replicas": a.min_replicas,
        "max_replicas": a.needed, "surplus": a.surplus, "headroom": a.headroom,
        "capacity_per_replica_per_s": a.capacity_per_s,
        "scale_out_per_pod_per_s": a.per_pod_per_s,
        "peak_per_s": a.peak.rate_per_s if a.peak else None,
        "surplus_cost": surplus, "hpa_yaml": a.hpa_yaml or None,
        "skipped_hours": a.skipped_hours,
        "hours": [{"hour": h.bucket.isoformat(), "requests": h.requests,
                   "rate_per_s": h.rate_per_s, "replicas": h.replicas,
                   "per_replica_per_s": h.per_replica_per_s, "p99_ms": h.p99_ms,
                   "p99_above_bounds": h.p99_above, "meets_target": h.meets}
                  for h in a.hours]}}
