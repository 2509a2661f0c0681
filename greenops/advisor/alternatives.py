"""A smaller or newer GPU for the measured load: the published figures of data/gpus.csv and the
price catalog, an estimate labelled so, proposed only where the measured memory fits."""

from __future__ import annotations

import math
from dataclasses import dataclass

from greenops.advisor import gpus as gpu_table
from greenops.advisor.measure import (
    MEMORY_BOUND_PCT,
    MONTH_H,
    TARGET_UTIL_PCT,
    Diagnosis,
    Monthly,
    Profile,
    estimate_confidence,
    memory_signal,
    own_limit,
    power_at,
    scaled_effect,
)
from greenops.costs.recommend import MEMORY_HEADROOM


@dataclass(frozen=True)
class Alternative:
    spec: gpu_table.GpuSpec
    instance: gpu_table.InstanceOffer  # the cheapest whole instances holding `gpus`
    instances: int
    ratio: float  # alternative / current capacity of the bound resource
    gpus: int
    util_pct: float
    power_w: float  # per GPU at util_pct
    kwh: float  # per month
    co2e_kg: float
    usd: float
    j_per_inference: float | None
    usd_per_1k: float | None


def _bound_resource(p: Profile) -> tuple[str | None, str]:
    signal = memory_signal(p)
    if signal is None:
        return None, ("which resource binds is unknown (memory activity not reported): the "
                      "less favourable of the compute and memory-bandwidth ratios")
    if signal[1] >= MEMORY_BOUND_PCT:
        return "memory", f"memory-bandwidth-bound ({signal[1]:.0f} % busy): memory bandwidth"
    return "compute", (f"memory interface {signal[1]:.0f} % busy: dense FP16 tensor "
                       "throughput")


def _ratio(cur: gpu_table.GpuSpec, alt: gpu_table.GpuSpec, resource: str | None
           ) -> float | None:
    keys = [resource] if resource else ["compute", "memory"]
    ratios = []
    for key in keys:
        c, a = cur.capacity(key), alt.capacity(key)
        if not c or a is None:
            return None
        ratios.append(a / c)
    return min(ratios)


def alternatives(p: Profile, m: Monthly, spec: gpu_table.GpuSpec, hosts: list
                 ) -> tuple[list[Alternative], str, str]:
    """Every table GPU priced in the hosts' catalog region and option that holds the measured
    peak memory, with its estimated month at the measured load; and what the estimate rests
    on, or why there is none."""
    resource, resource_text = _bound_resource(p)
    if len({(h.provider, h.region, h.purchase_option) for h in hosts}) != 1:
        return [], resource_text, "the workload's hosts differ in provider, region or option"
    offers = gpu_table.offers(hosts[0])
    if not offers:
        return [], resource_text, (f"the catalog prices no GPU for {hosts[0].provider or 'aws'}"
                                   f" {hosts[0].region or '(no region)'} "
                                   f"{hosts[0].purchase_option}")
    limit = own_limit(p, spec)
    u = p.util_pct
    out = []
    for model, offer in sorted(offers.items()):
        alt = offer.spec
        if model == spec.model or alt.board_power_w is None or alt.memory_mib is None:
            continue
        r = _ratio(spec, alt, resource)
        if not r:
            continue
        plan = max(u, TARGET_UTIL_PCT)
        n = max(1, math.ceil(p.gpus * u / (r * plan) - 1e-9))
        u_alt = p.gpus * u / (r * n)
        need_mib = p.mem_used_max_mib * p.gpus / min(n, p.gpus) * MEMORY_HEADROOM
        if need_mib > alt.memory_mib:
            continue
        watts = power_at(p, alt.board_power_w, u_alt, limit)
        if watts is None:
            continue
        ratio = n * watts / (p.gpus * p.power_w)
        instance, count, usd_h = offer.cheapest(n)
        usd = usd_h * MONTH_H
        out.append(Alternative(
            alt, instance, count, r, n, u_alt, watts, m.kwh * ratio, m.co2e_kg * ratio, usd,
            None if m.j_per_inference is None else m.j_per_inference * ratio,
            usd / m.month_inferences * 1000 if m.month_inferences else None))
    return out, resource_text, ""


def alternative_gpu(p: Profile, m: Monthly, spec: gpu_table.GpuSpec | None, hosts: list,
                     conf: tuple[str, str], skipped: list[str]) -> Diagnosis | None:
    rule = "smaller or newer GPU"
    missing = [what for what, value in (
        ("utilisation", p.util_pct), ("power", p.power_w),
        ("memory used", p.mem_used_max_mib)) if value is None]
    if missing:
        skipped.append(f"{rule}: {', '.join(missing)} not reported")
        return None
    if spec is None:
        skipped.append(f"{rule}: '{p.gpu_name or 'unnamed GPU'}' is not in the published "
                       "GPU table")
        return None
    if spec.board_power_w is None and p.power_limit_w is None:
        skipped.append(f"{rule}: no published board power for the {spec.model}")
        return None
    if m.usd is None:
        skipped.append(f"{rule}: the current cost is unknown ({m.usd_problem})")
        return None
    resource, _ = _bound_resource(p)
    unpublished = [key for key in ([resource] if resource else ["compute", "memory"])
                   if spec.capacity(key) is None]
    if unpublished:
        what = {"compute": "dense FP16 tensor throughput", "memory": "memory bandwidth"}
        skipped.append(f"{rule}: the {spec.model}'s "
                       f"{' and '.join(what[k] for k in unpublished)} is not published")
        return None
    found, resource_text, why = alternatives(p, m, spec, hosts)
    if why:
        skipped.append(f"{rule}: {why}")
        return None
    better = sorted((a for a in found if a.kwh < m.kwh and a.usd < m.usd),
                    key=lambda a: (a.usd, a.kwh))
    if not better:
        return None
    best = better[0]
    evidence = [
        f"{p.gpus} × {spec.model} at {p.util_pct:.1f} % utilisation, {p.power_w:.0f} W each, "
        f"memory used at most {p.mem_used_max_mib / 1024:.1f} GiB per GPU",
        f"bound resource: {resource_text}",
        f"{best.spec.model}: {best.ratio:.2f}× the {spec.model}'s published capacity, "
        f"{best.spec.memory_gb:.0f} GB, {best.spec.board_power_w:.0f} W board power"]
    levers = [f"{a.gpus} × {a.spec.model} ({a.instances} × {a.instance.instance_type} at "
              f"${a.instance.usd_per_hour:.4f}/h) at {a.util_pct:.0f} %: "
              f"{a.kwh:,.0f} kWh and ${a.usd:,.0f} a month" for a in better[:3]]
    m_per = m.j_per_inference
    method = (
        f"estimate from published figures (data/gpus.csv, each row cites its datasheet): the "
        f"measured load ({p.gpus} GPUs × {p.util_pct:.1f} %) scaled by the ratio of the bound "
        f"resource, packed to at least {TARGET_UTIL_PCT:.0f} % on whole GPUs "
        f"(⌈{p.gpus} × {p.util_pct:.1f} % ÷ ({best.ratio:.3f} × "
        f"{max(p.util_pct, TARGET_UTIL_PCT):.0f} %)⌉ = {best.gpus}); power per GPU "
        f"{best.power_w:.0f} W at {best.util_pct:.0f} % on the measured power line scaled to "
        f"its {best.spec.board_power_w:.0f} W; energy and CO2e scale with total GPU power "
        f"({best.gpus} × {best.power_w:.0f} W against {p.gpus} × {p.power_w:.0f} W measured); "
        f"cost = {best.instances} × {best.instance.instance_type} "
        f"({best.instance.gpu_count} GPU(s) each) × ${best.instance.usd_per_hour:.4f}/h × "
        f"720 h ({best.instance.source}; whole instances, the cheapest holding {best.gpus} "
        f"GPU(s)) against the measured ${m.usd:,.0f}; memory: the measured peak × 1.2 fits its "
        f"{best.spec.memory_gb:.0f} GB. Peak memory counts what the server reserved (vLLM "
        f"holds 90 % by default). Includes packing to {TARGET_UTIL_PCT:.0f} %: not additive "
        "with under-utilised. Check it: run the alternative as a variant.")
    if m_per is not None and best.j_per_inference is not None:
        method += (f" Per inference: {m_per:.3g} J → {best.j_per_inference:.3g} J"
                   + (f", ${m.usd_per_1k:.4f} → ${best.usd_per_1k:.4f} per 1k"
                      if m.usd_per_1k is not None and best.usd_per_1k is not None else "")
                   + ".")
    effect = scaled_effect(m, best.kwh / m.kwh - 1 if m.kwh else 0.0, best.usd - m.usd,
                            method)
    table = [{"model": a.spec.model, "instance": f"{a.instances} × {a.instance.instance_type}",
              "gpus": a.gpus,
              "util_pct": a.util_pct, "power_w": a.power_w, "kwh": a.kwh, "usd": a.usd,
              "j_per_inference": a.j_per_inference, "usd_per_1k": a.usd_per_1k,
              "ratio": a.ratio, "source_url": a.spec.source_url,
              "retrieved": a.spec.retrieved, "better": a in better}
             for a in sorted(found, key=lambda a: a.usd)]
    return Diagnosis("smaller_gpu", f"A different GPU: {best.spec.model}", evidence, levers,
                     effect, *estimate_confidence(conf, "published peak figures, not this "
                                                         "model's measured speed"), table)
