"""Benchmark runs: validating and storing what the agent posts, finding a branch's baseline,
acknowledging regressions, and the history a workload's page plots.

Plain functions over the models; the API and the pages only call these.
"""

from __future__ import annotations

import math
import uuid
from datetime import UTC, datetime
from functools import lru_cache

from django.db import IntegrityError, transaction
from django.urls import reverse

from collectors import bench_gate as gate
from greenops.benchmarks import changepoints
from greenops.benchmarks.models import Acknowledgement, BenchmarkRun, BenchmarkSample
from greenops.chart_style import MAX_POINTS
from greenops.errors import FieldError, invalid
from greenops.teams.models import Team
from greenops.telemetry.wire import json_int, nul_at, text_field
from greenops.workloads.models import Workload

MAX_SAMPLES = 2000
JSONB_KEYS = ("labels", "hardware", "host_energy", "settings", "comparison")
MAX_INDEX = 2**31 - 1  # BenchmarkSample.index, a PositiveIntegerField
MAX_COUNT = 2**63 - 1  # BenchmarkSample.count, a BigIntegerField
SOURCES = ("nvml", "simulated")
SAMPLE_FLOATS = ("wall_s", "gpu_energy_j", "cpu_ram_energy_j", "avg_power_w", "gpu_util_pct",
                 "throughput_per_s", "energy_per_inference_j", "it_energy_per_inference_j",
                 "p99_ms", "co2e_g", "cost_usd", "cost_per_1k_usd")
RUN_MEDIANS = ("wall_s", "gpu_energy_j", "cpu_ram_energy_j", "avg_power_w", "gpu_util_pct",
               "energy_per_inference_j", "p99_ms", "throughput_per_s", "cost_per_1k_usd",
               "co2e_g")
DOC_KEYS = {"run_id", "workload", "source", "agent_version", "commit", "branch", "base_commit",
            "baseline_commit", "command", "started_at", "labels", "hardware", "hardware_key",
            "host_energy", "settings", "samples", "comparison"}


def _number(value, field: str, nullable: bool = True) -> float | None:
    if value is None and nullable:
        return None
    if isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value) \
            or value < 0:
        raise invalid(field, "must be a non-negative number" + (" or null" if nullable else ""))
    return float(value)


def _object(doc: dict, key: str, nullable: bool = False) -> dict | None:
    value = doc.get(key)
    if value is None and nullable:
        return None
    if not isinstance(value, dict):
        raise invalid(key, "must be a JSON object" + (" or null" if nullable else ""))
    return value


def _samples(doc: dict) -> list[BenchmarkSample]:
    raw = doc.get("samples")
    if not isinstance(raw, list) or not raw:
        raise invalid("samples", "must be a non-empty array of repeats")
    if len(raw) > MAX_SAMPLES:
        raise invalid("samples", f"at most {MAX_SAMPLES} repeats")
    out, seen = [], set()
    for i, s in enumerate(raw):
        where = f"samples[{i}]"
        if not isinstance(s, dict):
            raise invalid(where, "must be an object")
        role = s.get("role")
        if role not in ("head", "base"):
            raise invalid(f"{where}.role", "must be 'head' (this run) or 'base' (merge base)")
        index = json_int(s.get("index"))
        if type(index) is not int or not 0 <= index <= MAX_INDEX:
            raise invalid(f"{where}.index", f"must be an integer between 0 and {MAX_INDEX}")
        if (role, index) in seen:
            raise invalid(f"{where}.index", f"repeat {index} of {role} appears twice")
        seen.add((role, index))
        count = json_int(s.get("count"))
        if count is not None and (type(count) is not int or not 0 < count <= MAX_COUNT):
            raise invalid(f"{where}.count", f"must be an integer between 1 and {MAX_COUNT} "
                          "or null")
        method = s.get("energy_method") or ""
        if not isinstance(method, str) or len(method) > 20:
            raise invalid(f"{where}.energy_method", "must be a short string")
        values = {k: _number(s.get(k), f"{where}.{k}", nullable=k != "wall_s")
                  for k in SAMPLE_FLOATS}
        out.append(BenchmarkSample(role=role, index=index, count=count, energy_method=method,
                                   **values))
    if not any(s.role == "head" for s in out):
        raise invalid("samples", "needs at least one repeat with role 'head'")
    return out


def _comparison(doc: dict) -> gate.Comparison | None:
    raw = doc.get("comparison")
    if raw is None:
        return None
    try:
        result = gate.Comparison.from_dict(raw)
    except (TypeError, KeyError, ValueError, AttributeError):
        raise invalid("comparison", "must be the gate result greenops-agent bench writes") \
            from None
    if result.verdict not in (gate.PASS, gate.FAIL, gate.INCONCLUSIVE):
        raise invalid("comparison.verdict", "must be pass, fail or inconclusive")
    return result


def _check_interleaved(comparison: gate.Comparison, samples: list[BenchmarkSample]) -> None:
    """A run measured against its merge base carries both sides' repeats: the verdict must be
    the one the gate gives for them (same module, same tolerances and alpha), so a stored
    "pass" can always be traced to its numbers."""
    if not any(s.role == "base" for s in samples):
        return  # compared with a stored run or a file: those repeats are not in this doc

    def values(role: str) -> dict[str, list[float | None]]:
        side = sorted((s for s in samples if s.role == role), key=lambda s: s.index)
        return {k.key: [getattr(s, k.key) for s in side] for k in gate.KPIS}

    tolerances = {r.kpi: r.tolerance_pct for r in comparison.rows}
    again = gate.compare(values("base"), values("head"), comparison.baseline, tolerances,
                         comparison.alpha,
                         gate.estimated_kpis(s.energy_method or None for s in samples),
                         paired=comparison.paired, gated=comparison.gated_kpis)
    if [(r.kpi, r.verdict) for r in again.rows] != [(r.kpi, r.verdict) for r in
                                                      comparison.rows] \
            or again.verdict != comparison.verdict:
        raise invalid("comparison", f"does not follow from the samples: the gate gives "
                      f"{again.verdict} ({again.reason}) for them")


def store_run(team: Team, doc, posted_by: str = "") -> tuple[BenchmarkRun, bool]:
    """Validate and store a posted run; a resent run_id returns the stored run unchanged."""
    if not isinstance(doc, dict):
        raise invalid("", "the payload must be a JSON object")
    if unknown := sorted(set(doc) - DOC_KEYS):
        raise invalid(unknown[0], "is not a known field")
    for key in JSONB_KEYS:  # stored as jsonb, which cannot hold NUL in a key or a text
        if where := nul_at(doc.get(key), key):
            raise invalid(where, "must not contain a NUL character (\\u0000)")
    try:
        run_id = uuid.UUID(str(doc.get("run_id")))
    except ValueError:
        raise invalid("run_id", "must be a UUID string") from None
    existing = BenchmarkRun.objects.filter(team=team, run_id=run_id).first()
    if existing is not None:
        return existing, False
    slug = text_field(doc, "workload", 100, required=True)
    workload = Workload.objects.filter(team=team, slug=slug).first()
    if workload is None:
        raise invalid("workload", f"no workload '{slug}' in team {team.name}: register it "
                      "first (Workloads page) and pass its slug")
    source = doc.get("source")
    if source not in SOURCES:
        raise invalid("source", "must be 'nvml' or 'simulated'")
    started = _number(doc.get("started_at"), "started_at", nullable=False)
    labels = _object(doc, "labels", nullable=True) or {}
    if len(labels) > 50 or not all(isinstance(k, str) and isinstance(v, str) and len(k) <= 100
                                   and len(v) <= 500 for k, v in labels.items()):
        raise invalid("labels", "at most 50 string labels (key <= 100, value <= 500 chars)")
    samples = _samples(doc)
    comparison = _comparison(doc)
    if comparison is not None and source != "simulated":
        _check_interleaved(comparison, samples)
    if comparison is not None and source == "simulated" and comparison.verdict != \
            gate.INCONCLUSIVE:
        raise invalid("comparison.verdict", "a simulated run is never gated")
    # Optional texts: absent and null both mean "not known" (stored as "").
    texts = {k: doc.get(k) or "" for k in ("commit", "branch", "base_commit",
                                           "baseline_commit", "command", "agent_version")}
    run = BenchmarkRun(
        team=team, workload=workload, run_id=run_id, source=source,
        commit=text_field(texts, "commit", 64), branch=text_field(texts, "branch", 200),
        base_commit=text_field(texts, "base_commit", 64),
        baseline_commit=text_field(texts, "baseline_commit", 64),
        command=text_field(texts, "command", 4000),
        agent_version=text_field(texts, "agent_version", 40),
        started_at=datetime.fromtimestamp(started, UTC), labels=labels,
        hardware=_object(doc, "hardware"),
        hardware_key=text_field(doc, "hardware_key", 500, required=True),
        host_energy=_object(doc, "host_energy", nullable=True),
        settings=_object(doc, "settings", nullable=True) or {},
        comparison=comparison.as_dict() if comparison else None,
        verdict=comparison.verdict if comparison else "", posted_by=posted_by[:100],
    )
    head = [s for s in samples if s.role == "head"]
    for key in RUN_MEDIANS:
        values = [getattr(s, key) for s in head]
        # A median over some repeats only would not be the run's figure: unknown instead.
        setattr(run, key, gate.median(values) if None not in values else None)
    try:
        with transaction.atomic():
            run.save()
            for s in samples:
                s.run = run
            BenchmarkSample.objects.bulk_create(samples)
    except IntegrityError:  # the same run_id posted twice at once: the other one won
        return BenchmarkRun.objects.get(team=team, run_id=run_id), False
    return run, True


def run_url(run: BenchmarkRun) -> str:
    return reverse("benchmark-run", args=[run.team.slug, run.id])


def sample_dict(s: BenchmarkSample) -> dict:
    return {"role": s.role, "index": s.index, "count": s.count,
            "energy_method": s.energy_method or None,
            **{k: getattr(s, k) for k in SAMPLE_FLOATS}}


def baseline(team: Team, workload_slug: str, branch: str, hardware_key: str) -> dict:
    """The latest measured run of ``branch`` on this hardware, with its repeats (404 if none)."""
    workload = Workload.objects.filter(team=team, slug=workload_slug).first()
    if workload is None:
        raise FieldError(404, "not_found", "workload", f"no workload '{workload_slug}' in team "
                          f"{team.name}")
    runs = BenchmarkRun.objects.baseline_candidates(workload, branch)
    run = runs.filter(hardware_key=hardware_key).first()
    if run is None:
        other = runs.first()
        if other is None:
            message = (f"no measured run of {workload.slug} on branch {branch} yet: run the "
                       f"benchmark on {branch} with --server to start its history")
        else:
            message = (f"hardware changed: {branch}'s latest run of {workload.slug} "
                       f"({other.short_commit}) was on {other.hardware_key}, this run is on "
                       f"{hardware_key}; this run starts a new baseline")
        raise FieldError(404, "no_baseline", "hardware_key" if other else "branch", message)
    return {"id": run.id, "commit": run.commit, "branch": run.branch, "source": run.source,
            "hardware_key": run.hardware_key, "url": run_url(run),
            "started_at": run.started_at.timestamp(), "settings": run.settings,
            "samples": [sample_dict(s) for s in run.samples.filter(role="head")]}


def acknowledge(run: BenchmarkRun, kpi: str, reason: str, user) -> Acknowledgement:
    """Record that a reviewer accepts this run's regression of ``kpi``, and why."""
    reason = (reason or "").strip()
    if kpi not in run.failed_kpis():
        raise invalid("kpi", "this run did not fail on that KPI: only regressions are "
                      "acknowledged")
    if not reason:
        raise invalid("reason", "say why the regression is accepted")
    if len(reason) > 2000 or "\x00" in reason:
        raise invalid("reason", "at most 2000 characters, without NUL")
    ack, created = Acknowledgement.objects.get_or_create(
        run=run, kpi=kpi, defaults={"reason": reason, "user": user})
    if not created:
        raise invalid("kpi", "already acknowledged")
    return ack


def history(workload: Workload, branch: str | None = None, limit: int = MAX_POINTS
            ) -> list[dict]:
    """A workload's newest ``limit`` runs (the charts' point budget), oldest first, each
    with its KPI medians, the band the gate used and its acknowledgements: what the history
    page plots and lists."""
    runs = BenchmarkRun.objects.filter(workload=workload)
    if branch:
        runs = runs.filter(branch=branch)
    runs = list(runs.prefetch_related("acknowledgements").order_by("-started_at", "-id")[:limit])
    out = []
    for run in reversed(runs):
        result = run.gate_result()
        rows = {r.kpi: r for r in result.rows} if result else {}
        acks = {a.kpi: a for a in run.acknowledgements.all()}
        kpis = {}
        for k in gate.KPIS:
            row = rows.get(k.key)
            band = None
            if row is not None and row.baseline is not None:
                tol = row.tolerance_pct / 100.0
                band = (row.baseline * (1 - tol), row.baseline * (1 + tol))
            kpis[k.key] = {"value": getattr(run, k.key), "band": band,
                           "verdict": row.verdict if row else "",
                           "ack": acks[k.key].reason if k.key in acks else None}
        out.append({"run": run, "kpis": kpis})
    return out


def branches(workload: Workload) -> list[str]:
    return list(BenchmarkRun.objects.filter(workload=workload).order_by("branch")
                .values_list("branch", flat=True).distinct())


@lru_cache(maxsize=256)
def _e_divisive(values: tuple[float, ...]) -> tuple[changepoints.ChangePoint, ...]:
    # Seeded, so the same series always gives the same marks: safe to keep per process.
    return tuple(changepoints.e_divisive(list(values)))


def change_points(points: list[dict], kpi: str = gate.PRIMARY) -> list[dict]:
    """Where ``kpi`` (energy per inference by default) stepped, per branch and hardware, over
    ``points`` (history() output, oldest first): E-Divisive means over the runs' medians.
    Measured and simulated runs are never in one series: simulated runs form series of their
    own (a demo's or a dry run's history), whose steps say ``simulated``; runs on other hardware
    are never part of a series either."""
    series: dict[tuple[str, str, bool], list[BenchmarkRun]] = {}
    for p in points:
        run = p["run"]
        if getattr(run, kpi) is None:
            continue
        series.setdefault((run.branch, run.hardware_key, run.simulated), []).append(run)
    out = []
    for (branch, hw, simulated), series_runs in series.items():
        values = tuple(float(getattr(r, kpi)) for r in series_runs)
        cuts = [0] + [cp.index for cp in _e_divisive(values)] + [len(values)]
        for k, cp in enumerate(_e_divisive(values), start=1):
            run = series_runs[cp.index]
            out.append({"run": run, "branch": branch, "hardware_key": hw, "kpi": kpi,
                        "simulated": simulated,
                        "before": cp.before, "after": cp.after, "change_pct": cp.change_pct,
                        "size_pct": abs(cp.change_pct), "p_value": cp.p_value,
                        "up": cp.after > cp.before,
                        "runs_before": cp.index - cuts[k - 1],
                        "runs_after": cuts[k + 1] - cp.index,
                        "previous": series_runs[cp.index - 1]})
    return sorted(out, key=lambda c: (c["run"].started_at, c["run"].id))
