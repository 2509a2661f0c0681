"""The benchmarks app: storing runs the agent posts, the baseline it asks for, acknowledged
regressions, the pages; and the agent's `bench` against a live server, end to end."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

from collectors import bench_gate as gate
from collectors import cli
from greenops.benchmarks import runs
from greenops.benchmarks.models import Acknowledgement, BenchmarkRun, BenchmarkSample
from greenops.errors import FieldError
from greenops.teams.models import ApiToken
from greenops.workloads.models import Workload
from tests.support import ROOT
from tests.support.bench_fakes import write_profile
from tests.support.benchmarks import BASE_J, HW, run_doc


@pytest.fixture
def ranker(team):
    return Workload.objects.create(team=team, name="Ranker", slug="ranker", kind="inference")


@pytest.fixture
def api_token(team, ranker):
    return ApiToken.issue(team, "ci")[1]


def post(client, token: str | None, doc) -> object:
    headers = {"HTTP_AUTHORIZATION": f"Bearer {token}"} if token else {}
    return client.post("/api/v1/benchmarks/runs", json.dumps(doc),
                       content_type="application/json", **headers)


def test_a_posted_run_is_stored_once_with_its_medians(client, team, api_token):
    doc = run_doc(regress_pct=20.0)
    resp = post(client, api_token, doc)
    assert resp.status_code == 201, resp.content
    body = resp.json()
    assert body["verdict"] == "fail" and body["created"] is True
    run = BenchmarkRun.objects.get()
    assert body["url"] == f"/teams/{team.slug}/benchmarks/runs/{run.id}/"
    # Head repeats: 120.0, 120.6, 119.4, 120.24, 119.76 J -> median 120.0 J, 0.12 J/inference.
    assert run.gpu_energy_j == pytest.approx(120.0)
    assert run.energy_per_inference_j == pytest.approx(0.12)
    assert run.p99_ms is None  # not measured: unknown, never 0
    assert run.samples.count() == 10 and run.samples.filter(role="base").count() == 5
    assert run.failed_kpis() == ["energy_per_inference_j"]
    assert run.posted_by.startswith("token gha_")
    again = post(client, api_token, doc)  # a resend (timeout, retry) stores nothing twice
    assert again.status_code == 200 and again.json()["created"] is False
    assert BenchmarkRun.objects.count() == 1 and BenchmarkSample.objects.count() == 10


@pytest.mark.parametrize(("change", "field", "message"), [
    (lambda d: d.update(workload="nope"), "workload", "no workload 'nope'"),
    (lambda d: d["samples"][3].update(gpu_energy_j=-1), "samples[3].gpu_energy_j",
     "non-negative"),
    (lambda d: d["samples"][3].update(role="main"), "samples[3].role", "head"),
    (lambda d: d["samples"][6].update(index=0), "samples[6].index", "appears twice"),
    (lambda d: d.update(samples=[s for s in d["samples"] if s["role"] == "base"]), "samples",
     "role 'head'"),
    (lambda d: d.update(source="guess"), "source", "nvml"),
    (lambda d: d.update(run_id="7"), "run_id", "UUID"),
    (lambda d: d.update(hardware_key=""), "hardware_key", "non-empty"),
    (lambda d: d.update(extra=1), "extra", "not a known field"),
    (lambda d: d.update(comparison={"rows": []}), "comparison", "gate result"),
])
def test_bad_runs_are_refused_naming_the_field(client, api_token, change, field, message):
    doc = run_doc()
    change(doc)
    resp = post(client, api_token, doc)
    assert resp.status_code == 422, resp.content
    assert resp.json()["field"] == field
    assert message in resp.json()["message"]
    assert not BenchmarkRun.objects.exists() and not BenchmarkSample.objects.exists()


def test_a_simulated_run_cannot_claim_a_verdict(client, api_token):
    doc = run_doc(source="simulated", gated=False)
    doc["comparison"] = run_doc(regress_pct=20)["comparison"]  # "fail" on simulated GPUs
    resp = post(client, api_token, doc)
    assert resp.status_code == 422 and resp.json()["field"] == "comparison.verdict"


def test_a_verdict_that_does_not_follow_from_the_repeats_is_refused(client, api_token):
    doc = run_doc(regress_pct=20.0)  # the gate says fail for these repeats
    doc["comparison"]["verdict"] = "pass"
    doc["comparison"]["rows"][0]["verdict"] = "pass"
    resp = post(client, api_token, doc)
    assert resp.status_code == 422 and resp.json()["field"] == "comparison"
    assert "the gate gives fail" in resp.json()["message"]
    assert not BenchmarkRun.objects.exists()


def test_runs_need_a_token(client, ranker):
    assert post(client, None, run_doc()).status_code == 401
    assert post(client, "gha_wrong", run_doc()).status_code == 401
    assert not BenchmarkRun.objects.exists()


def test_baseline_is_the_latest_measured_run_of_the_branch_on_this_hardware(client, team,
                                                                             api_token):
    def baseline(hw=HW, branch="main"):
        return client.get("/api/v1/benchmarks/baseline",
                          {"workload": "ranker", "branch": branch, "hardware_key": hw},
                          HTTP_AUTHORIZATION=f"Bearer {api_token}")

    resp = baseline()
    assert resp.status_code == 404
    assert "no measured run of ranker on branch main yet" in resp.json()["message"]
    post(client, api_token, run_doc(branch="main", commit="aaaa1111"))
    post(client, api_token, run_doc(branch="main", commit="bbbb2222", regress_pct=3))
    post(client, api_token, run_doc(branch="main", commit="cccc3333", source="simulated"))
    post(client, api_token, run_doc(branch="feature", commit="dddd4444"))
    resp = baseline()
    assert resp.status_code == 200
    doc = resp.json()
    assert doc["commit"] == "bbbb2222"  # newest measured main run; simulated never a baseline
    assert [s["role"] for s in doc["samples"]] == ["head"] * 5
    assert doc["samples"][0]["gpu_energy_j"] == pytest.approx(103.0)  # 100 J x 1.03
    resp = baseline(hw="NVIDIA H100 80GB HBM3 700 W 1980 MHz | driver 550.54.15")
    assert resp.status_code == 404
    assert "hardware changed" in resp.json()["message"]
    assert resp.json()["field"] == "hardware_key"


def test_acknowledging_needs_a_failed_kpi_and_a_reason(team, users, api_token, client):
    post(client, api_token, run_doc(regress_pct=20.0))
    run = BenchmarkRun.objects.get()
    with pytest.raises(FieldError) as exc:
        runs.acknowledge(run, "p99_ms", "why not", users["member"])
    assert exc.value.field == "kpi"
    with pytest.raises(FieldError) as exc:
        runs.acknowledge(run, "energy_per_inference_j", "  ", users["member"])
    assert exc.value.field == "reason"
    with pytest.raises(FieldError) as exc:  # PostgreSQL text cannot hold NUL
        runs.acknowledge(run, "energy_per_inference_j", "ok\x00", users["member"])
    assert exc.value.field == "reason"
    runs.acknowledge(run, "energy_per_inference_j", "bigger model: +2 pt accuracy",
                     users["member"])
    with pytest.raises(FieldError):
        runs.acknowledge(run, "energy_per_inference_j", "again", users["member"])
    assert run.unacknowledged_kpis() == []


def test_integers_as_json_schema_counts_them(team, api_token, client):
    """3.0 is the integer 3 in JSON Schema, so the OpenAPI schema allows it (schemathesis found
    count 2.0 refused); an index beyond its column is refused naming the field, not by
    PostgreSQL."""
    doc = run_doc()
    doc["samples"][0].update(index=0.0, count=2.0)
    r = post(client, api_token, doc)
    assert r.status_code == 201, r.content
    stored = BenchmarkSample.objects.get(role=doc["samples"][0]["role"], index=0)
    assert (stored.count, type(stored.count)) == (2, int)
    for key, value in (("index", 2**40), ("count", 2**70), ("count", 2.5), ("index", True)):
        bad = run_doc(commit="eeee5555")
        bad["samples"][0][key] = value
        r = post(client, api_token, bad)
        assert r.status_code == 422 and r.json()["field"] == f"samples[0].{key}", (key, value)
    assert BenchmarkRun.objects.count() == 1


def test_a_nul_anywhere_in_a_run_names_its_path(team, api_token, client):
    """jsonb cannot store \\u0000 either: schemathesis' NUL deep in `settings` was a 422 with
    no field, from PostgreSQL."""
    for where, path in ((("settings",), "settings.a[1].b"), (("hardware",), "hardware.k\x00")):
        doc = run_doc()
        doc[where[0]] = {"a": [1, {"b": "x\x00"}]} if where[0] == "settings" else {"k\x00": 1}
        r = post(client, api_token, doc)
        assert r.status_code == 422 and r.json()["field"] == path, r.content
    assert not BenchmarkRun.objects.exists()


def test_viewer_cannot_acknowledge(client, team_roles, team, api_token):
    post(client, api_token, run_doc(regress_pct=20.0))
    run = BenchmarkRun.objects.get()
    client.force_login(team_roles["viewer"])
    resp = client.post(f"/teams/{team.slug}/benchmarks/runs/{run.id}/acknowledge/",
                       {"kpi": "energy_per_inference_j", "reason": "fine"})
    assert resp.status_code == 403
    assert not Acknowledgement.objects.exists()
    html = client.get(f"/teams/{team.slug}/benchmarks/runs/{run.id}/").content.decode()
    assert 'name="reason"' not in html  # no form the viewer cannot use


def test_run_page_shows_the_gate_table_and_samples(client, team_roles, team, api_token):
    post(client, api_token, run_doc(regress_pct=20.0))
    run = BenchmarkRun.objects.get()
    client.force_login(team_roles["member"])
    url = f"/teams/{team.slug}/benchmarks/runs/{run.id}/"
    html = client.get(url).content.decode()
    for cell in gate.table_cells(run.gate_result())[0][:5]:  # the CI job's very table
        assert cell in html
    assert "+20.0 %" in html and "merge base" in html and "NVML counter" in html
    assert "unknown: the run gave no price" in html
    resp = client.post(url + "acknowledge/", {"kpi": "energy_per_inference_j", "reason": ""})
    assert resp.status_code == 400 and "reason: say why" in resp.content.decode()
    resp = client.post(url + "acknowledge/", {"kpi": "energy_per_inference_j",
                                              "reason": "bigger model, agreed in review"})
    assert resp.status_code == 302
    html = client.get(url).content.decode()
    assert "bigger model, agreed in review" in html and "acknowledged" in html
    assert 'name="reason"' not in html  # nothing left to acknowledge


def test_history_page_plots_each_kpi_with_band_and_acknowledgements(client, team_roles, team,
                                                                    api_token, users):
    post(client, api_token, run_doc(branch="main", commit="aaaa1111", gated=False))
    post(client, api_token, run_doc(branch="main", commit="bbbb2222", regress_pct=20.0))
    post(client, api_token, run_doc(branch="main", commit="cccc3333", source="simulated"))
    failed = BenchmarkRun.objects.get(commit="bbbb2222")
    runs.acknowledge(failed, "energy_per_inference_j", "new model", users["member"])
    client.force_login(team_roles["viewer"])
    resp = client.get(f"/teams/{team.slug}/benchmarks/ranker/")
    assert resp.status_code == 200
    html = resp.content.decode()
    assert "Includes simulated runs" in html
    fig = json.loads(html.split('id="fig-energy_per_inference_j" type="application/json">')[1]
                     .split("</script>")[0])
    x = fig["data"][2]["x"]
    assert [v.split()[0] for v in x] == ["aaaa1111", "bbbb2222", "cccc3333"]
    # The band is the gate's baseline (0.1 J) +- 5 %: only the gated run has one.
    assert fig["data"][0]["y"] == [None, pytest.approx(0.095), None]
    assert fig["data"][1]["y"] == [None, pytest.approx(0.105), None]
    assert fig["data"][2]["y"][1] == pytest.approx(0.12)
    assert fig["data"][3]["name"] == "acknowledged regression"
    assert fig["data"][3]["text"] == ["new model"]
    overview = client.get(f"/teams/{team.slug}/benchmarks/").content.decode()
    assert "cccc3333"[:8] in overview and "simulated" in overview


@pytest.fixture
def live_setup(transactional_db, team, tmp_path, monkeypatch):
    Workload.objects.create(team=team, name="Ranker", slug="ranker", kind="inference")
    token = ApiToken.issue(team, "ci")[1]
    monkeypatch.setenv("BENCH_FAKES_ENERGY_FILE", str(tmp_path / "energy_mj"))
    monkeypatch.setenv("PYTHONPATH", str(ROOT))
    monkeypatch.setenv("GREENOPS_API_TOKEN", token)
    for var in ("GREENOPS_SERVER", "GITHUB_SHA", "CI_COMMIT_SHA", "GITHUB_HEAD_REF",
                "GITHUB_REF_NAME", "CI_COMMIT_REF_NAME", "BENCH_FAKES_DRIVER"):
        monkeypatch.delenv(var, raising=False)
    return token


def test_agent_gates_against_the_servers_history_end_to_end(live_server, live_setup, tmp_path,
                                                            monkeypatch, capsys):
    def bench(directory: Path, commit: str, branch: str, *flags: str) -> int:
        monkeypatch.chdir(directory)
        return cli.main(["bench", "--workload", "ranker", "--nvml-lib", "tests.support.bench_fakes",
                         "--no-host-energy", "--server", live_server.url, "--warmup", "0",
                         "--count", "1000", "--commit", commit, "--branch", branch,
                         "--tolerance", "throughput_per_s=100", *flags,
                         "--", sys.executable, "-m", "tests.support.bench_fakes"])

    main_dir = write_profile(tmp_path / "main", BASE_J)
    pr_dir = write_profile(tmp_path / "pr", [j * 1.2 for j in BASE_J])
    # No history yet: inconclusive, saying why, and the run is stored.
    assert bench(main_dir, "aaaa1111", "main", "--baseline-branch", "main") == 3
    assert "no measured run of ranker on branch main yet" in capsys.readouterr().out
    # The pull request's head uses 20 % more energy per inference: the gate fails.
    assert bench(pr_dir, "bbbb2222", "feature", "--baseline-branch", "main") == 1
    out = capsys.readouterr().out
    assert "baseline: main @ aaaa1111" in out and "GreenOps efficiency gate: FAIL" in out
    stored = BenchmarkRun.objects.get(commit="bbbb2222")
    assert stored.verdict == "fail" and stored.baseline_commit == "aaaa1111"
    assert stored.energy_per_inference_j == pytest.approx(0.12)
    assert stored.comparison["rows"][0]["baseline"] == pytest.approx(0.1)
    # A new driver on the runner: the stored history is not comparable.
    monkeypatch.setenv("BENCH_FAKES_DRIVER", "555.42.02")
    assert bench(pr_dir, "bbbb2222", "feature", "--baseline-branch", "main") == 3
    assert "hardware changed" in capsys.readouterr().out


def test_workload_kpi_page_links_to_its_benchmark_history(client, team_roles, team, ranker):
    client.force_login(team_roles["viewer"])
    html = client.get(f"/teams/{team.slug}/kpis/workloads/ranker/").content.decode()
    assert f'href="/teams/{team.slug}/benchmarks/ranker/"' in html
