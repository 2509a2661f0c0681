"""The report as one long CSV table, written from a report's stored figures.

Columns (version 2; a changed meaning or order bumps COLUMNS_VERSION, which every row carries):

  columns_version, methodology_version, team, month, time_zone,
  row_type         total | host | workload | job | not_attributed (the total less the host
                   rows, host "not attributed"; the total less the workload rows, workload
                   "not attributed")
  workload, host, provider, region, instance_type, purchase_option,
  scope            Scope 2 (own site) | Scope 3 (cat. 1, cloud) for host rows
  accelerator_kwh (GPUs, AI accelerators, edge modules: every device the agents report),
  cpu_ram_kwh, it_kwh (accelerators + CPU + RAM), facility_kwh (IT x PUE),
  co2e_location_kg, co2e_market_kg (empty: no supplier-specific factor),
  cost_usd (empty: unknown, see note), inferences, accelerator_hours,
  idle_accelerator_hours, idle_cost_usd,
  measurement_method, simulated (true | false), note

Reading back: the `host` rows plus the host "not attributed" row add up to the `total` row
(energy, carbon, cost), and so do the `workload` rows plus the workload "not attributed" row
(negative where workloads share devices, which count under each); `job` rows are attributions.
`read_totals` does exactly that and is what the tests use.
"""

from __future__ import annotations

import csv
import io

from defusedcsv import csv as defusedcsv

COLUMNS_VERSION = "2"  # 2: device columns named accelerator_* (issue 33)
COLUMNS = (
    "columns_version", "methodology_version", "team", "month", "time_zone", "row_type",
    "workload", "host", "provider", "region", "instance_type", "purchase_option", "scope",
    "accelerator_kwh", "cpu_ram_kwh", "it_kwh", "facility_kwh", "co2e_location_kg",
    "co2e_market_kg", "cost_usd", "inferences", "accelerator_hours", "idle_accelerator_hours",
    "idle_cost_usd",
    "measurement_method", "simulated", "note",
)
# Host-row columns that add up to the total row.
ADDITIVE = ("accelerator_kwh", "cpu_ram_kwh", "it_kwh", "facility_kwh", "co2e_location_kg",
            "co2e_market_kg", "cost_usd", "accelerator_hours", "idle_accelerator_hours",
            "idle_cost_usd")


# Columns the host rows + the "not attributed" host row add up to the total in; the same for
# the workload rows.
HOST_SUMMED = ("accelerator_kwh", "cpu_ram_kwh", "it_kwh", "facility_kwh", "co2e_location_kg",
               "cost_usd", "accelerator_hours")
WORKLOAD_SUMMED = ("it_kwh", "facility_kwh", "co2e_location_kg", "cost_usd")


def _cell(value) -> str | int | float:
    if value is None:
        return ""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int | float):
        # Written as repr (round-trips exactly, so the table reads back into the same sums),
        # and left unescaped by defusedcsv: a number is never a formula.
        return value
    text = str(value)
    # defusedcsv prefixes ' to a text starting = + - @ | %; OWASP lists tab and CR too.
    return "'" + text if text[:1] in ("\t", "\r") else text


def rows(fig: dict) -> list[dict]:
    base = {"columns_version": COLUMNS_VERSION, "methodology_version": fig["methodology_version"],
            "team": fig["team"]["slug"], "month": fig["month"], "time_zone": fig["time_zone"]}
    t = fig["totals"]
    out = [{**base, "row_type": "total", "accelerator_kwh": t["gpu_energy_kwh"],
            "cpu_ram_kwh": t["cpu_ram_energy_kwh"], "it_kwh": t["energy_kwh"],
            "facility_kwh": t["facility_energy_kwh"], "co2e_location_kg": t["co2e_kg"],
            "co2e_market_kg": t["co2e_market_kg"], "cost_usd": t["cost_usd"],
            "inferences": t["requests"], "accelerator_hours": t["gpu_hours"],
            "idle_accelerator_hours": t["idle_gpu_hours"], "idle_cost_usd": t["idle_cost_usd"],
            "simulated": t["simulated"],
            "note": "; ".join(_unknown_notes(t.get("unknown") or {})
                              + ([f"known part of cost_usd (a lower bound): "
                                  f"{t['cost_known_usd']!r} USD"]
                                 if t["cost_usd"] is None and "cost_known_usd" in t else []))
            or ("" if t["cost_usd"] is not None else "cost unknown: a host has no price")}]
    for h in fig["hosts"]:
        out.append({**base, "row_type": "host", "host": h["host"], "provider": h["provider"],
                    "region": h["region"], "instance_type": h["instance_type"],
                    "purchase_option": h["purchase_option"], "scope": h["scope"],
                    "accelerator_kwh": h["gpu_energy_kwh"], "cpu_ram_kwh": h["cpu_ram_energy_kwh"],
                    "it_kwh": h["energy_kwh"], "facility_kwh": h["facility_energy_kwh"],
                    "co2e_location_kg": h["co2e_kg"], "co2e_market_kg": h["co2e_market_kg"],
                    "cost_usd": h["cost_usd"], "accelerator_hours": h["gpu_hours"],
                    "idle_accelerator_hours": h["idle_gpu_hours"],
                    "idle_cost_usd": h["idle_cost_usd"],
                    "measurement_method": h["measurement"],
                    "simulated": "simulated" in h["measurement"],
                    "note": h["price_problem"]})
    rest = fig.get("not_attributed")
    if rest is not None:
        h = rest["hosts"]
        out.append({**base, "row_type": "not_attributed", "host": NOT_ATTRIBUTED,
                    "accelerator_kwh": h["gpu_energy_kwh"], "cpu_ram_kwh": h["cpu_ram_energy_kwh"],
                    "it_kwh": h["energy_kwh"], "facility_kwh": h["facility_energy_kwh"],
                    "co2e_location_kg": h["co2e_kg"], "cost_usd": h["cost_usd"],
                    "accelerator_hours": h["gpu_hours"],
                    "note": "the total less the host rows (hosts no longer in the team, "
                            "rollups not yet rewritten): host rows + this row = total"})
    for w in fig["workloads"]:
        out.append({**base, "row_type": "workload", "workload": w["workload"],
                    "it_kwh": w["energy_kwh"], "facility_kwh": w["facility_energy_kwh"],
                    "co2e_location_kg": w["co2e_kg"], "cost_usd": w["cost_usd"],
                    "inferences": w["requests"], "accelerator_hours": w["gpu_hours"],
                    "simulated": w["simulated"],
                    "note": "; ".join(["attribution: devices shared by workloads count under each",
                                       *_unknown_notes(w.get("unknown") or {})])})
    if rest is not None:
        w = rest["workloads"]
        out.append({**base, "row_type": "not_attributed", "workload": NOT_ATTRIBUTED,
                    "it_kwh": w["energy_kwh"], "facility_kwh": w["facility_energy_kwh"],
                    "co2e_location_kg": w["co2e_kg"], "cost_usd": w["cost_usd"],
                    "note": "the total less the workload rows (devices in no workload; negative "
                            "where workloads share devices): workload rows + this row = total"})
    for j in fig["jobs"]:
        out.append({**base, "row_type": "job", "workload": j["workload"],
                    "it_kwh": j["energy_kwh"], "facility_kwh": j["facility_energy_kwh"],
                    "co2e_location_kg": j["co2e_kg"], "cost_usd": j["cost_usd"],
                    "accelerator_hours": j["gpu_hours"], "note": f"training job {j['name']}"})
    return out


NOT_ATTRIBUTED = "not attributed"


def _unknown_notes(unknown: dict) -> list[str]:
    """"unknown: it_kwh, cost_usd -- no GPU data ..." per reason: an empty cell is null, and the
    note says why (never 0)."""
    by_reason: dict[str, list[str]] = {}
    for key, reason in unknown.items():
        by_reason.setdefault(reason, []).append(key)
    return [f"unknown {', '.join(keys)}: {reason}" for reason, keys in by_reason.items()]


def write(fig: dict) -> bytes:
    buf = io.StringIO()
    # defusedcsv: a team, host or workload named "=HYPERLINK(...)" is written '=HYPERLINK(...),
    # text to a spreadsheet, not a formula it would run (OWASP "CSV injection").
    w = defusedcsv.DictWriter(buf, fieldnames=COLUMNS, lineterminator="\r\n")
    w.writeheader()
    for r in rows(fig):
        w.writerow({c: _cell(r.get(c)) for c in COLUMNS})
    return buf.getvalue().encode("utf-8")


def read_totals(data: bytes) -> dict:
    """{'total': {column: value}, 'hosts_sum': {column: value}} from a written CSV; a column
    with any empty host cell sums to None (unknown), as the report does."""
    reader = csv.DictReader(io.StringIO(data.decode("utf-8")))
    if tuple(reader.fieldnames or ()) != COLUMNS:
        raise ValueError("not a GreenOps report CSV of columns version " + COLUMNS_VERSION)
    total: dict = {}
    hosts: list[dict] = []
    workloads: list[dict] = []
    rest: dict[str, dict] = {}
    for r in reader:
        if r["row_type"] == "total":
            total = {c: float(r[c]) if r[c] != "" else None for c in ADDITIVE}
            total["inferences"] = int(r["inferences"])
        elif r["row_type"] == "host":
            hosts.append(r)
        elif r["row_type"] == "workload":
            workloads.append(r)
        elif r["row_type"] == "not_attributed":
            rest["hosts" if r["host"] else "workloads"] = r

    def sums(rows: list[dict], columns: tuple[str, ...]) -> dict:
        out: dict = {}
        for c in columns:
            cells = [r[c] for r in rows]
            out[c] = None if any(v == "" for v in cells) else sum(float(v) for v in cells)
        return out
    return {"total": total, "hosts_sum": sums(hosts, ADDITIVE),
            # Rows + the explicit "not attributed" row: equal to the total, column by column.
            "hosts_with_rest": sums(hosts + [rest["hosts"]], HOST_SUMMED)
            if "hosts" in rest else None,
            "workloads_with_rest": sums(workloads + [rest["workloads"]], WORKLOAD_SUMMED)
            if "workloads" in rest else None}
