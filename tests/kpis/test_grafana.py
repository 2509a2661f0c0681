"""The Grafana dashboard in the repository runs exactly the PromQL the Prometheus test checks.

tests/kpis/test_prometheus.py runs greenops.kpis.promql.PANELS against a real Prometheus and
compares each with the KPI API; this test holds the committed JSON to those expressions, and
the provisioning and compose files to the paths they name.
"""

from __future__ import annotations

import json
from pathlib import Path

import yaml

from greenops.kpis import grafana, promql

ROOT = Path(__file__).resolve().parents[2]
GRAFANA = ROOT / "dashboards" / "grafana"


def test_committed_dashboard_is_the_generated_one():
    committed = (GRAFANA / "greenops.json").read_text()
    assert committed == grafana.render(), "run: python -m greenops.kpis.grafana > " \
                                          "dashboards/grafana/greenops.json"


def test_every_panel_expression_is_a_tested_one_and_every_tested_one_has_a_panel():
    doc = json.loads((GRAFANA / "greenops.json").read_text())
    exprs = [t["expr"] for p in doc["panels"] for t in p["targets"]]
    tested = [p.expr for p in promql.PANELS + promql.GAUGES]
    assert exprs == tested
    # The stats ask for the whole selected range, as the test's window.
    assert all("[$__range]" in p.expr for p in promql.PANELS)
    names = {v["name"] for v in doc["templating"]["list"]}
    assert {"team", "workload", "datasource"} <= names


def test_provisioning_and_compose_point_at_the_files():
    ds = yaml.safe_load((GRAFANA / "provisioning/datasources/greenops.yml").read_text())
    assert ds["datasources"][0]["type"] == "prometheus"
    dash = yaml.safe_load((GRAFANA / "provisioning/dashboards/greenops.yml").read_text())
    path = dash["providers"][0]["options"]["path"]
    compose = yaml.safe_load((ROOT / "docker-compose.yml").read_text())
    grafana_svc, prom_svc = compose["services"]["grafana"], compose["services"]["prometheus"]
    assert grafana_svc["profiles"] == prom_svc["profiles"] == ["observability"]
    assert any(v.endswith(f"{path}/greenops.json:ro") for v in grafana_svc["volumes"])
    assert any(v.startswith("./dashboards/grafana/prometheus.yml:") for v in prom_svc["volumes"])
    prom = yaml.safe_load((GRAFANA / "prometheus.yml").read_text())
    job = prom["scrape_configs"][0]
    assert job["metrics_path"] == "/api/v1/teams/TEAM_SLUG/metrics"
    assert job["authorization"]["type"] == "Bearer"
    # Without the profile, the default stack is unchanged: no service depends on these two.
    # (The read replica is the other optional profile, docs/operations.md.)
    for name, svc in compose["services"].items():
        if name not in ("prometheus", "grafana", "postgres-replica"):
            assert "profiles" not in svc, name
