"""Plotly figure specs of the team home and host pages, from greenops.telemetry.fleet series
(already within the point budget) and daily KPI rollups.

The house style (LAYOUT, axes, palette, the point budget) lives in greenops.chart_style.
"""

from __future__ import annotations

from greenops.chart_style import LAYOUT, axis, colour, layout, line_mode
from greenops.telemetry.fleet import TOP_HOSTS
from greenops.telemetry.models import devices_noun
from greenops.units import plural


def _sim(simulated: bool) -> str:
    return " (simulated)" if simulated else ""


def _gpu_label(s: dict, nouns: dict | None = None) -> str:
    noun = (nouns or {}).get((s["host"], s["gpu_index"]), "GPU")
    return f"{s['host']} · {noun} {s['gpu_index']}{_sim(s['simulated'])}"


def _per_gpu_lines(fs: dict, key: str, unit: str, nouns: dict | None = None) -> list[dict]:
    return [{"type": "scatter", **line_mode(s[key]), "name": _gpu_label(s, nouns), "x": fs["t"],
             "y": s[key], "connectgaps": False,
             "hovertemplate": f"%{{y:,.1f}} {unit}<extra>{_gpu_label(s, nouns)}</extra>"}
            for s in fs["series"]]


def utilisation(fs: dict, one: str = "GPU", many: str = "GPUs",
                nouns: dict | None = None) -> dict:
    """Per device for a small fleet; else the fleet's mean with the p10-p90 band across them.
    ``one``/``many`` name the devices ("GPU", "accelerator", "device" for a mix); ``nouns``
    (host, index) -> noun names each device's line."""
    if fs["grouping"] == "gpu":
        data = _per_gpu_lines(fs, "util_pct", "%", nouns)
        title = f"{one[:1].upper()}{one[1:]} utilisation"
    else:
        # The band is two traces: p90 drawn invisibly, then p10 filled up to it.
        band = {"type": "scatter", "mode": "lines", "x": fs["t"], "connectgaps": False,
                "line": {"width": 0, "color": colour(0)}}
        data = [
            {**band, "name": "p90", "y": fs["util_p90_pct"], "showlegend": False,
             "hovertemplate": "p90 %{y:.1f} %<extra></extra>"},
            {**band, "name": f"p10–p90 of {many}", "y": fs["util_p10_pct"], "fill": "tonexty",
             "fillcolor": "rgba(21,128,61,0.18)",
             "hovertemplate": "p10 %{y:.1f} %<extra></extra>"},
            {"type": "scatter", **line_mode(fs["util_mean_pct"]),
             "name": f"mean of {many}" + _sim(fs["simulated"]),
             "x": fs["t"], "y": fs["util_mean_pct"], "connectgaps": False,
             "line": {"color": colour(0), "width": 2},
             "hovertemplate": "mean %{y:.1f} %<extra></extra>"},
        ]
        title = (f"{one[:1].upper()}{one[1:]} utilisation of "
                 f"{plural(fs['totals']['gpus'], one, many)}: mean and p10–p90")
    return {"data": data, "layout": layout(
        title, yaxis=axis("%", range=[0, 100]))}


def power(fs: dict, one: str = "GPU", many: str = "GPUs", nouns: dict | None = None) -> dict:
    if fs["grouping"] == "gpu":
        data = _per_gpu_lines(fs, "power_w", "W", nouns)
        title = f"{one[:1].upper()}{one[1:]} power draw"
    else:
        data = [{"type": "scatter", **line_mode(fs["power_w"]),
                 "name": "fleet" + _sim(fs["simulated"]),
                 "x": fs["t"], "y": fs["power_w"], "connectgaps": False,
                 "line": {"color": colour(1)},
                 "hovertemplate": "%{y:,.0f} W<extra>all " + many + "</extra>"}]
        title = f"{one[:1].upper()}{one[1:]} power draw of the fleet (sum of its {many})"
    return {"data": data, "layout": layout(title, yaxis=axis("W", rangemode="tozero"))}


def _step_label(step_s: int) -> str:
    if step_s % 86400 == 0:
        return "day" if step_s == 86400 else f"{step_s // 86400} days"
    if step_s % 3600 == 0:
        return "hour" if step_s == 3600 else f"{step_s // 3600} hours"
    return "minute" if step_s == 60 else f"{step_s // 60} minutes"


# Hosts the energy chart stacks one by one (greenops.telemetry.fleet.top_hosts picks them).
MAX_HOST_BARS = TOP_HOSTS


def host_bars(by_host: dict[str, list[float]], other: dict | None = None
              ) -> list[tuple[str, list[float]]]:
    """(name, kWh per bucket) to stack. From a fleet series: its hosts, then `other` (the rest
    summed by fleet.top_hosts) as one "N other hosts" bar. From a plain host -> kWh mapping:
    every host, or the MAX_HOST_BARS hosts with the most energy over the range (by name) then
    the others' sum. Bar heights are unchanged."""
    if other is not None:
        return [*by_host.items(), (f"{other['hosts']:,} other hosts", other["kwh"])]
    if len(by_host) <= MAX_HOST_BARS + 1:
        return list(by_host.items())
    top = sorted(sorted(by_host, key=lambda h: -sum(by_host[h]))[:MAX_HOST_BARS])
    rest = [kwh for host, kwh in by_host.items() if host not in set(top)]
    other_kwh = [sum(values) for values in zip(*rest, strict=True)]
    return [(host, by_host[host]) for host in top] + [(f"{len(rest)} other hosts", other_kwh)]


def energy(fs: dict, one: str = "GPU") -> dict:
    """Device energy per display bucket, stacked by host: a bar's height is the fleet's kWh."""
    data = [{"type": "bar", "name": host, "x": fs["t"], "y": [round(v, 6) for v in kwh],
             "marker": {"color": colour(i)},
             "hovertemplate": "%{y:,.4g} kWh<extra>" + host + "</extra>"}
            for i, (host, kwh) in enumerate(host_bars(fs["energy_kwh_by_host"],
                                                      fs.get("energy_kwh_other_hosts")))]
    step = _step_label(fs["step_s"])
    title = f"{one[:1].upper()}{one[1:]} energy per {step}{_sim(fs['simulated'])}"
    other = fs.get("energy_kwh_other_hosts")
    extra = {}
    if other is not None:  # say what the last bar is: the stacks still add to the fleet's kWh
        title += (f"<br><sub>the {len(fs['energy_kwh_by_host'])} hosts using the most, then "
                  f"{other['hosts']:,} others as one bar</sub>")
        # The second title line gets its own room above the plot (on a phone it spans the
        # width and met the top tick label).
        extra["margin"] = {**LAYOUT["margin"], "t": 60}
    return {"data": data, "layout": layout(title, barmode="stack", yaxis=axis("kWh"), **extra)}


def per_day_by_workload(days: dict, key: str, title: str, unit: str, fmt: str) -> dict:
    """Daily bars stacked by workload (dashboards.headline.daily_by_workload)."""
    data = [{"type": "bar", "name": name, "x": days["t"], "y": values,
             "marker": {"color": colour(i)},
             "hovertemplate": f"%{{y:{fmt}}} {unit}<extra>{name}</extra>"}
            for i, (name, values) in enumerate(days[key].items())]
    return {"data": data, "layout": layout(title + _sim(days["simulated"]), barmode="stack",
                                           yaxis=axis(unit))}


def fleet_figures(fs: dict, kinds=("gpu",), nouns: dict | None = None) -> dict[str, dict]:
    """The three charts, naming the devices by their kinds (issue 33: "GPU" only for GPUs)."""
    kinds = list(kinds)
    one, many = devices_noun(kinds, plural=False), devices_noun(kinds)
    return {"utilisation": utilisation(fs, one, many, nouns), "power": power(fs, one, many, nouns),
            "energy": energy(fs, one)}
