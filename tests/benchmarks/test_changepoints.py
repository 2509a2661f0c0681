"""Change points in a benchmark's history (greenops/benchmarks/changepoints.py): the
E-Divisive statistic by hand, hand-made series with known steps, and the history page marking
the commit where energy per inference stepped up."""

from __future__ import annotations

import json
import time
import uuid

import numpy as np
import pytest

from greenops.benchmarks import changepoints, runs
from greenops.benchmarks.models import BenchmarkRun
from greenops.workloads.models import Workload


def test_the_statistic_by_hand():
    # x = 0 0 0 1 1 1, at least 3 a side: the one split is tau = 3. Across it 9 pairs, each
    # |0 - 1| = 1: 2/(3*3) * 9 = 2; within each side every distance is 0. Q = 3*3/6 * 2 = 3.
    taus, q = changepoints.split_statistics(np.array([0.0, 0, 0, 1, 1, 1]))
    assert taus.tolist() == [3] and q.reshape(-1).tolist() == pytest.approx([3.0])
    # x = 0 1 0 1 0 1 with parts of 2 or more: for tau = 2 the best right part is x[2:4] or
    # x[2:6] = {0, 1, ...}: every part holds as many 0s as 1s, so no split separates them:
    # left {0,1} mean within 1; right {0,1}: within 1, across 2*2/4 = 1: E = 1 - 1 - 1 < 0.
    taus, q = changepoints.split_statistics(np.array([0.0, 1, 0, 1, 0, 1]), min_size=2)
    assert taus.tolist() == [2, 3, 4]
    assert (q.reshape(-1) < 0).all()


def _noisy(rng, level, n, spread=0.02):
    return list(level * (1 + spread * rng.standard_normal(n)))


def test_a_known_step_is_found_at_its_run_with_its_size():
    rng = np.random.default_rng(7)
    series = _noisy(rng, 0.100, 12) + _noisy(rng, 0.120, 9)  # +20 % from run 12 on
    [step] = changepoints.e_divisive(series)
    assert step.index == 12
    assert step.change_pct == pytest.approx(20.0, abs=2.0)
    assert step.p_value < 0.05


def test_noise_alone_has_no_step_and_two_steps_are_both_found():
    rng = np.random.default_rng(8)
    assert changepoints.e_divisive(_noisy(rng, 0.1, 30)) == []
    series = _noisy(rng, 0.1, 10) + _noisy(rng, 0.13, 10) + _noisy(rng, 0.1, 10)
    steps = changepoints.e_divisive(series)
    assert [s.index for s in steps] == [10, 20]
    assert steps[0].change_pct > 20 and steps[1].change_pct < -15
    # Too short to say anything: fewer than 3 runs on each side of any split.
    assert changepoints.e_divisive([0.1, 0.1, 0.2, 0.2, 0.2]) == []


def test_the_same_series_always_gives_the_same_marks():
    rng = np.random.default_rng(9)
    series = _noisy(rng, 0.1, 8, 0.05) + _noisy(rng, 0.108, 8, 0.05)
    assert changepoints.e_divisive(series) == changepoints.e_divisive(series)


@pytest.fixture
def ranker(team):
    return Workload.objects.create(team=team, name="Ranker", slug="ranker", kind="inference")


def _store(team, commit: str, joules: float, branch: str = "main", source: str = "nvml"):
    """A run as `greenops-agent bench --output` posts it without a gate: 5 repeats of
    ``joules`` J for 1,000 inferences, stored in posting order (the history's order)."""
    samples = [{"role": "head", "index": i, "wall_s": 2.0, "gpu_energy_j": joules,
                "energy_method": "counter", "count": 1000,
                "energy_per_inference_j": joules / 1000} for i in range(5)]
    doc = {"run_id": str(uuid.uuid4()), "workload": "ranker", "source": source,
           "commit": commit, "branch": branch, "started_at": time.time(),
           "hardware": {"gpus": []}, "hardware_key": "A100 400 W | driver 550",
           "samples": samples, "comparison": None}
    return runs.store_run(team, doc)[0]


def test_history_page_marks_the_commit_where_energy_stepped_up(client, team_roles, team,
                                                               ranker):
    rng = np.random.default_rng(11)
    energy = _noisy(rng, 100.0, 8, 0.01) + _noisy(rng, 118.0, 6, 0.01)  # +18 % at run 8
    stored = [_store(team, f"{i:04d}beef", j) for i, j in enumerate(energy)]
    # Another branch and a lone simulated run are never part of main's measured series.
    _store(team, "feed0001", 300.0, branch="bigger-model")
    _store(team, "5150beef", 500.0, source="simulated")
    # Per-run energy is each run's median of its repeats: 0.100 J -> 0.118 J per inference.
    steps = runs.change_points(runs.history(ranker))
    [step] = steps
    assert step["run"] == stored[8] and step["branch"] == "main" and step["up"]
    assert step["previous"] == stored[7]
    assert (step["runs_before"], step["runs_after"]) == (8, 6)
    assert step["change_pct"] == pytest.approx(18.0, abs=1.5)

    client.force_login(team_roles["viewer"])
    html = client.get(f"/teams/{team.slug}/benchmarks/ranker/").content.decode()
    section = html.split('id="change-points"')[1].split("</section>")[0]
    assert f"Stepped up {step['size_pct']:.1f} %" in section
    assert "0008beef" in section and "0007beef" in section
    assert "over 8 runs before and 6 after" in section
    fig = json.loads(html.split('id="fig-energy_per_inference_j" type="application/json">')[1]
                     .split("</script>")[0])
    assert fig["layout"]["shapes"][0]["x0"] == f"0008beef #{stored[8].id}"
    assert fig["layout"]["annotations"][0]["text"].startswith("▲ +")
    assert BenchmarkRun.objects.count() == 16
    # On another branch's page alone: no step.
    html = client.get(f"/teams/{team.slug}/benchmarks/ranker/?branch=bigger-model").content
    assert b"No step found on bigger-model" in html


def test_a_wholly_simulated_history_finds_its_step_labelled_simulated(client, team_roles, team,
                                                                      ranker):
    """A demo's (or a dry run's) history is all simulated runs: the step is found among them,
    said to be simulated on the page and the chart, and the measured runs of the same branch
    and hardware form a series of their own (no mixing: their flat series shows no step)."""
    rng = np.random.default_rng(11)
    energy = _noisy(rng, 100.0, 8, 0.01) + _noisy(rng, 118.0, 6, 0.01)  # +18 % at run 8
    stored = [_store(team, f"{i:04d}5eed", j, source="simulated") for i, j in enumerate(energy)]
    # 6 measured runs at 118 J, flat: were they mixed in after the simulated ones, the step
    # would still be at run 8 but over 8 before and 12 after -- the assertion below says 6.
    for i in range(6):
        _store(team, f"{i:04d}cafe", 118.0)
    [step] = runs.change_points(runs.history(ranker))
    assert step["simulated"] and step["run"] == stored[8] and step["up"]
    assert (step["runs_before"], step["runs_after"]) == (8, 6)
    # medians 0.100 -> 0.118 J per inference: +18 % (noise 1 % each side)
    assert step["change_pct"] == pytest.approx(18.0, abs=1.5)

    client.force_login(team_roles["viewer"])
    html = client.get(f"/teams/{team.slug}/benchmarks/ranker/").content.decode()
    section = html.split('id="change-points"')[1].split("</section>")[0]
    assert f"Stepped up {step['size_pct']:.1f} %</strong> " \
           '<span class="verdict simulated">simulated runs</span>' in section
    assert "No step found" not in section
    fig = json.loads(html.split('id="fig-energy_per_inference_j" type="application/json">')[1]
                     .split("</script>")[0])
    assert fig["layout"]["annotations"][0]["text"].endswith("% (simulated)")
