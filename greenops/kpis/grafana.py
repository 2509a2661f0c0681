"""The Grafana dashboard JSON (dashboards as code), built from greenops.kpis.promql.

    python -m greenops.kpis.grafana > dashboards/grafana/greenops.json

tests/kpis/test_grafana.py checks that the committed file is exactly this output, so the panels
run the PromQL that tests/kpis/test_prometheus.py checked against the KPI API.
"""

from __future__ import annotations

import json

from greenops.kpis.promql import GAUGES, PANELS, Panel

UID = "greenops-team"
DATASOURCE = {"type": "prometheus", "uid": "${datasource}"}


def _stat(i: int, panel: Panel) -> dict:
    return {
        "id": i + 1, "type": "stat", "title": panel.title,
        "gridPos": {"h": 5, "w": 6, "x": (i % 4) * 6, "y": (i // 4) * 5},
        "datasource": DATASOURCE,
        "fieldConfig": {"defaults": {"unit": panel.unit, "decimals": 3}, "overrides": []},
        "options": {"reduceOptions": {"calcs": ["lastNotNull"]}, "colorMode": "none",
                    "textMode": "value"},
        "targets": [{"refId": "A", "datasource": DATASOURCE, "expr": panel.expr,
                     "instant": True, "range": False}],
    }


def _series(i: int, y: int, panel: Panel) -> dict:
    return {
        "id": 100 + i, "type": "timeseries", "title": panel.title,
        "gridPos": {"h": 8, "w": 12, "x": (i % 2) * 12, "y": y},
        "datasource": DATASOURCE,
        "fieldConfig": {"defaults": {"unit": panel.unit}, "overrides": []},
        "targets": [{"refId": "A", "datasource": DATASOURCE, "expr": panel.expr,
                     "legendFormat": "{{host}} GPU {{gpu}}"}],
    }


def dashboard() -> dict:
    rows = (len(PANELS) + 3) // 4
    return {
        "uid": UID,
        "title": "GreenOps: team energy, carbon, cost and inference",
        "description": "Figures over the selected time range from GreenOps' /metrics (KPI "
                       "rollups); each stat equals the KPI API for the same window.",
        "tags": ["greenops"],
        "timezone": "utc",
        "schemaVersion": 38,
        "version": 1,
        "editable": True,
        "time": {"from": "now-24h", "to": "now"},
        "refresh": "1m",
        "templating": {"list": [
            {"name": "datasource", "type": "datasource", "query": "prometheus",
             "label": "Prometheus"},
            {"name": "team", "type": "query", "label": "Team", "datasource": DATASOURCE,
             "query": {"query": "label_values(greenops_gpu_energy_joules_total, team)",
                       "refId": "team"},
             "refresh": 2},
            {"name": "workload", "type": "query", "label": "Workload", "datasource": DATASOURCE,
             "query": {"query": 'label_values(greenops_workload_inferences_total'
                                '{team="$team"}, workload)', "refId": "workload"},
             "refresh": 2},
        ]},
        "panels": [_stat(i, p) for i, p in enumerate(PANELS)]
        + [_series(i, rows * 5, p) for i, p in enumerate(GAUGES)],
    }


def render() -> str:
    return json.dumps(dashboard(), indent=2, ensure_ascii=False) + "\n"


if __name__ == "__main__":
    print(render(), end="")
