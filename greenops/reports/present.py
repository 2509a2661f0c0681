"""A report's figures as the rows of text both the page and the PDF print.

One function per section returns headers and rows of ready strings, so the page and the PDF show
the same characters for the same stored figure; an unknown figure is "unknown" with its reason,
never 0.
"""

from __future__ import annotations

from dataclasses import dataclass, field

UNKNOWN = "unknown"


def num(value: float | int | None, digits: int = 2, unit: str = "") -> str:
    if value is None:
        return UNKNOWN
    text = f"{value:,.{digits}f}"
    return f"{text} {unit}".strip()


def pct(value: float | None) -> str:
    if value is None:
        return "–"
    return f"{value:+.1f} %"


@dataclass
class Table:
    key: str
    title: str
    headers: list[str]
    rows: list[list[str]]
    empty: str = ""
    notes: list[str] = field(default_factory=list)


# (label, totals key, digits, unit, big unit divisor and name for the PDF-style second unit)
SUMMARY = (
    ("IT energy (accelerators + CPU + RAM)", "energy_kwh", 3, "kWh", (1000, "MWh")),
    ("Facility energy (IT × PUE)", "facility_energy_kwh", 3, "kWh", (1000, "MWh")),
    ("Carbon, location-based", "co2e_kg", 3, "kg CO2e", (1000, "t CO2e")),
    ("Carbon, market-based", "co2e_market_kg", 3, "kg CO2e", (1000, "t CO2e")),
    ("Cost", "cost_usd", 2, "USD", None),
    ("Inferences", "requests", 0, "", None),
    ("Accelerator-hours", "gpu_hours", 1, "h", None),
    ("Accelerator utilisation", "gpu_util_pct", 1, "%", None),
    ("Idle accelerator-hours", "idle_gpu_hours", 1, "h", None),
    ("Idle cost", "idle_cost_usd", 2, "USD", None),
)


def partial_sum(known: float, unknown_parts: int, digits: int = 2, unit: str = "USD",
                what: str = "host", why: str = "unpriced") -> str:
    """The one rule for a sum with unknown parts (README, accounting): a lower bound that names
    what it leaves out, "≥ 1,234.56 USD (2 hosts unpriced)"."""
    s = "" if unknown_parts == 1 else "s"
    return f"≥ {num(known, digits, unit)} ({unknown_parts} {what}{s} {why})"


def _why_unknown(fig: dict, key: str) -> str:
    reason = (fig["totals"].get("unknown") or {}).get(key)
    if reason:
        return reason
    if key == "co2e_market_kg":
        return "no supplier-specific factor recorded on every site"
    if key in ("cost_usd", "idle_cost_usd"):
        problems = fig["methodology"]["price_problems"]
        return "; ".join(problems) if problems else "no price"
    if key == "gpu_util_pct":
        return "no accelerator samples"
    return ""


def summary(fig: dict) -> Table:
    t, prev, change = fig["totals"], fig["previous"], fig["change_pct"]
    rows = []
    for label, key, digits, unit, big in SUMMARY:
        value = num(t[key], digits, unit)
        if key == "cost_usd" and t[key] is None and t.get("unpriced_hosts"):
            value = partial_sum(t["cost_known_usd"], t["unpriced_hosts"])
        if big and t[key] is not None:
            value += f" ({num(t[key] / big[0], 3, big[1])})"
        note = _why_unknown(fig, key) if t[key] is None else ""
        shown = "flagged: coverage" if fig.get("change_flag") else pct(change[key])
        rows.append([label, value, num(prev[key], digits, unit), shown, note])
    notes = []
    if fig.get("coverage"):
        notes.append(f"Coverage: this month {fig['coverage']['text']}; previous month "
                     f"{fig['previous_coverage']['text']}.")
    if fig.get("change_flag"):
        notes.append(f"Change: {fig['change_flag']}.")
    return Table("summary", f"{fig['month_label']}{' so far' if fig.get('so_far') else ''} "
                 "at a glance", ["Figure", "This month", "Previous month", "Change", "Note"],
                 rows, notes=notes)


def cost_by_option(fig: dict) -> Table:
    rows = [[o["label"], str(o["hosts"]), num(o["cost_usd"], 2, "USD")]
            for o in fig["cost_by_option"]]
    return Table("cost_by_option", "Cost by purchase option",
                 ["Purchase option", "Hosts", "Cost"], rows)


def workloads(fig: dict) -> Table:
    rows = [[w["name"], w["kind"], num(w["requests"], 0), num(w["energy_per_inference_j"], 2,
             "J"), num(w["co2e_per_inference_g"], 4, "g"),
             num(w["cost_per_1k_inferences_usd"], 4, "USD"), num(w["latency_p50_ms"], 1, "ms"),
             num(w["latency_p99_ms"], 1, "ms"), num(w["throughput_per_s"], 3, "/s"),
             num(w["gpu_util_pct"], 1, "%")]
            for w in fig["workloads"]]
    return Table("workloads", "Workloads",
                 ["Workload", "Kind", "Inferences", "Energy / inference", "CO2e / inference",
                  "Cost / 1k inferences", "p50", "p99", "Throughput", "Accel. util."], rows,
                 empty="No workload had inferences or accelerator energy this month.",
                 notes=[f"Throughput of {w['name']}: over the time its inference windows "
                        f"measured ({w['coverage']})" for w in fig["workloads"]
                        if w.get("coverage") and w["requests"]]
                 + [f"{w['name']}: unknown ({reason})" for w in fig["workloads"]
                    for reason in dict.fromkeys((w.get("unknown") or {}).values())])


def jobs(fig: dict) -> Table:
    rows = [[j["name"], j["workload"], "running" if j["running"] else
             num(j["time_to_train_s"] / 3600, 2, "h"), num(j["energy_kwh"], 3, "kWh"),
             num(j["co2e_kg"], 3, "kg"), num(j["cost_usd"], 2, "USD")]
            for j in fig["jobs"]]
    return Table("jobs", "Training jobs",
                 ["Job", "Workload", "Time to train", "IT energy", "CO2e", "Cost"], rows,
                 empty="No training job ran this month.", notes=_job_notes(fig["jobs"]))


def _job_notes(items: list[dict]) -> list[str]:
    pending = [j["name"] for j in items if not j.get("accounted", True)]
    if not pending:
        return []
    return [f"{len(pending)} job(s) not yet accounted by the KPI task, so their energy, carbon "
            f"and cost are unknown: {', '.join(pending[:10])}"
            + (" …" if len(pending) > 10 else "")]


def hosts(fig: dict, limit: int | None = None) -> Table:
    items = fig["hosts"][:limit] if limit else fig["hosts"]
    rows = [[h["host"], h["instance_type"] or "–", h["purchase_option"], h["scope"],
             num(h["energy_kwh"], 3, "kWh"), num(h["facility_energy_kwh"], 3, "kWh"),
             num(h["co2e_kg"], 3, "kg"), num(h["cost_usd"], 2, "USD"),
             num(h["idle_gpu_hours"], 1, "h"), num(h["idle_cost_usd"], 2, "USD")]
            for h in items]
    notes = [f"{h['host']}: {h['price_problem']}" for h in items if h["price_problem"]]
    rest = fig.get("not_attributed")
    if rest is not None and fig["hosts"]:
        # Rows add up: the hosts not listed, what no host row claims, and the total.
        others = fig["hosts"][len(items):]
        if others:
            rows.append(_sum_row(f"{len(others)} other hosts", others))
        t, na = fig["totals"], rest["hosts"]
        rows.append(["Not attributed", "", "", "", num(na["energy_kwh"], 3, "kWh"),
                     num(na["facility_energy_kwh"], 3, "kWh"), num(na["co2e_kg"], 3, "kg"),
                     num(na["cost_usd"], 2, "USD"), "", ""])
        cost = num(t["cost_usd"], 2, "USD") if t["cost_usd"] is not None or not \
            t.get("unpriced_hosts") else partial_sum(t["cost_known_usd"], t["unpriced_hosts"])
        rows.append(["Total", "", "", "", num(t["energy_kwh"], 3, "kWh"),
                     num(t["facility_energy_kwh"], 3, "kWh"), num(t["co2e_kg"], 3, "kg"),
                     cost, num(t["idle_gpu_hours"], 1, "h"), num(t["idle_cost_usd"], 2, "USD")])
        notes.append("Host rows + \"Not attributed\" (the total less the host rows: hosts no "
                     "longer in the team, rollups not yet rewritten) = Total.")
    return Table("hosts", "Top hosts by cost" if limit else "Hosts",
                 ["Host", "Instance", "Purchase", "Scope", "IT energy", "Facility energy",
                  "CO2e (location)", "Cost", "Idle accel.-h", "Idle cost"], rows,
                 empty="No host ran or was paid for this month.", notes=notes)


def _sum_row(label: str, hosts: list[dict]) -> list[str]:
    def total(key: str) -> float | None:
        values = [h[key] for h in hosts]
        return None if any(v is None for v in values) else float(sum(values))
    return [label, "", "", "", num(total("energy_kwh"), 3, "kWh"),
            num(total("facility_energy_kwh"), 3, "kWh"), num(total("co2e_kg"), 3, "kg"),
            num(total("cost_usd"), 2, "USD"), num(total("idle_gpu_hours"), 1, "h"),
            num(total("idle_cost_usd"), 2, "USD")]


def sci(fig: dict) -> Table:
    rows = [[r["subject"], f"per {r['unit']}", num(r["r"], 0), num(r["e_kwh"], 3, "kWh"),
             num(r["ei_g"], 1, "g"), num(r["m_g"], 1, "g") if r["m_g"] is not None
             else "not recorded",
             num(r["sci_g"], 4 if r["unit"] == "inference" else 1, "g CO2e")]
            for r in fig["sci"]["rows"]]
    return Table("sci", "Software Carbon Intensity (SCI = (E × I + M) per R)",
                 ["Subject", "R", "R count", "E (facility)", "E × I", "M (embodied)", "SCI"],
                 rows, empty="No inferences or finished training jobs this month.",
                 notes=[fig["sci"]["i_note"], fig["sci"]["m_note"]])


def recommendations(fig: dict) -> Table:
    rows = [[r["subject"], r["kind"], num(r["monthly_usd_saved"], 2, "USD/month"),
             r["reasoning"]] for r in fig["recommendations"]["items"]]
    return Table("recommendations", "Recommendations open at month end",
                 ["Subject", "Kind", "Saving", "Why"], rows,
                 empty=fig["recommendations"]["note"] or "None.")


def alerts(fig: dict) -> Table:
    a = fig["alerts"]
    rows = [[r["rule"], r["what"], num(r["fired"], 0), r["state"]] for r in a["rows"]]
    return Table("alerts", "Alerts", ["Rule", "Watches", "Times fired", "State at month end"],
                 rows, empty=a["note"] or "No alert rule.")


def _utc(iso: str) -> str:
    return iso[:16].replace("T", " ")


def window_line(fig: dict) -> str:
    """The report's [start, end) as every surface prints a window (greenops.windows): "1–31 Oct
    2026, Europe/Paris", or "... (so far)" for the running month, with its UTC instants."""
    text = fig.get("window_text") or f"{fig['month_label']}, {fig['time_zone']}"
    return f"{text} ({_utc(fig['start'])} to {_utc(fig['end'])} UTC)"


def methodology(fig: dict) -> list[tuple[str, str]]:
    m = fig["methodology"]
    prices = "; ".join(m["price_sources"]) or "no price used"
    return [
        ("Methodology version", m["version"]),
        ("Month", window_line(fig)),
        ("Coverage", f"{fig['hours_with_data']} of {fig['hours_in_month']} hours have data"),
        *([("Month boundary", m["boundary"])] if m.get("boundary") else []),
        ("Energy", m["energy"]),
        ("PUE sources", m["pue_sources"] or "no energy this month"),
        ("Carbon, location-based", m["carbon_location"]),
        ("Intensity sources", m["intensity_sources"] or "no energy this month"),
        ("Carbon, market-based", m["carbon_market"]),
        ("Supplier factors", "; ".join(m.get("market_sources", [])) or "none recorded"),
        ("Embodied emissions (SCI M)", "recorded for " + ", ".join(m["embodied_sources"])
         if m.get("embodied_sources") else "not recorded"),
        ("Scope", "Electricity bought by the team's own site is Scope 2; cloud hosts' emissions "
                  "are the customer's Scope 3, category 1. Each host row says which applies."),
        ("CPU and RAM", m["cpu_ram_method"]),
        ("Cost", m["cost"]),
        ("Price snapshots", prices),
        ("Price problems", "; ".join(m["price_problems"]) or "none"),
        ("Measured or simulated", "Includes simulated data (a demo or test agent)"
         if m["simulated"] else "Measured on the hosts (no simulated samples)"),
    ]


def sections(fig: dict) -> list[Table]:
    return [summary(fig), cost_by_option(fig), workloads(fig), jobs(fig), hosts(fig, 10),
            sci(fig), recommendations(fig), alerts(fig)]
