"""Measured benchmark runs (``greenops-agent bench``), their repeats, and acknowledged
regressions.

A run is stored as the agent measured and judged it: the per-repeat samples, the hardware it
ran on, and the gate's comparison (collectors.bench_gate), so the run's page shows the very
table the CI job printed. The run's own figures are the medians of its repeats.
"""

from __future__ import annotations

from django.conf import settings
from django.db import models

from collectors import bench_gate as gate
from greenops.teams.models import Team
from greenops.workloads.models import Workload

KPI_CHOICES = [(k.key, k.label) for k in gate.KPIS]


class Verdict(models.TextChoices):
    NOT_GATED = "", "not gated"
    PASS = gate.PASS, "pass"
    FAIL = gate.FAIL, "fail"
    INCONCLUSIVE = gate.INCONCLUSIVE, "inconclusive"


class BenchmarkRunQuerySet(models.QuerySet):
    def baseline_candidates(self, workload: Workload, branch: str) -> BenchmarkRunQuerySet:
        """Measured (never simulated) runs of a branch, newest first."""
        return self.filter(workload=workload, branch=branch, source="nvml").order_by(
            "-started_at", "-id")


class BenchmarkRun(models.Model):
    team = models.ForeignKey(Team, models.CASCADE, related_name="benchmark_runs")
    workload = models.ForeignKey(Workload, models.CASCADE, related_name="benchmark_runs")
    run_id = models.UUIDField(help_text="chosen by the agent: a resent run is stored once")
    source = models.CharField(max_length=20, help_text="nvml (measured) or simulated")
    commit = models.CharField(max_length=64, blank=True)
    branch = models.CharField(max_length=200, blank=True)
    base_commit = models.CharField(max_length=64, blank=True,
                                   help_text="merge base measured alongside, interleaved")
    baseline_commit = models.CharField(max_length=64, blank=True,
                                       help_text="stored run the gate compared against")
    command = models.TextField(blank=True)
    agent_version = models.CharField(max_length=40, blank=True)
    started_at = models.DateTimeField()
    labels = models.JSONField(default=dict, blank=True)
    hardware = models.JSONField(default=dict)
    hardware_key = models.CharField(max_length=500)
    host_energy = models.JSONField(null=True, blank=True)
    settings = models.JSONField(default=dict, blank=True)
    comparison = models.JSONField(null=True, blank=True)
    verdict = models.CharField(max_length=20, choices=Verdict.choices, blank=True)
    posted_by = models.CharField(max_length=100, blank=True)
    created_at = models.DateTimeField(auto_now_add=True)
    # Medians over the run's own ("head") repeats; None where not measured.
    wall_s = models.FloatField(null=True)
    gpu_energy_j = models.FloatField(null=True)
    cpu_ram_energy_j = models.FloatField(null=True)
    avg_power_w = models.FloatField(null=True)
    gpu_util_pct = models.FloatField(null=True)
    energy_per_inference_j = models.FloatField(null=True)
    p99_ms = models.FloatField(null=True)
    throughput_per_s = models.FloatField(null=True)
    cost_per_1k_usd = models.FloatField(null=True)
    co2e_g = models.FloatField(null=True)

    objects = BenchmarkRunQuerySet.as_manager()

    class Meta:
        ordering = ["-started_at", "-id"]
        constraints = [
            models.UniqueConstraint(fields=["team", "run_id"], name="benchmark_run_id_per_team")
        ]
        indexes = [models.Index(fields=["workload", "branch", "started_at"])]

    def __str__(self) -> str:
        return f"{self.workload.slug} @ {self.short_commit}"

    @property
    def short_commit(self) -> str:
        return self.commit[:8] or "no commit"

    @property
    def simulated(self) -> bool:
        return self.source == "simulated"

    def gate_result(self) -> gate.Comparison | None:
        return gate.Comparison.from_dict(self.comparison) if self.comparison else None

    def failed_kpis(self) -> list[str]:
        result = self.gate_result()
        return [r.kpi for r in result.rows if r.verdict == gate.FAIL] if result else []

    def unacknowledged_kpis(self) -> list[str]:
        done = set(self.acknowledgements.values_list("kpi", flat=True))
        return [k for k in self.failed_kpis() if k not in done]


class BenchmarkSample(models.Model):
    """One repeat of the command: ``head`` is the run itself, ``base`` the merge base measured
    alongside it on the same runner."""

    run = models.ForeignKey(BenchmarkRun, models.CASCADE, related_name="samples")
    role = models.CharField(max_length=4, choices=[("head", "this run"), ("base", "merge base")])
    index = models.PositiveIntegerField()
    wall_s = models.FloatField()
    gpu_energy_j = models.FloatField(null=True)
    energy_method = models.CharField(max_length=20, blank=True)
    cpu_ram_energy_j = models.FloatField(null=True)
    avg_power_w = models.FloatField(null=True)
    gpu_util_pct = models.FloatField(null=True)
    count = models.BigIntegerField(null=True)
    throughput_per_s = models.FloatField(null=True)
    energy_per_inference_j = models.FloatField(null=True)
    it_energy_per_inference_j = models.FloatField(null=True)
    p99_ms = models.FloatField(null=True)
    co2e_g = models.FloatField(null=True)
    cost_usd = models.FloatField(null=True)
    cost_per_1k_usd = models.FloatField(null=True)

    class Meta:
        ordering = ["role", "index"]
        constraints = [
            models.UniqueConstraint(fields=["run", "role", "index"], name="benchmark_sample_key")
        ]


class Acknowledgement(models.Model):
    """A reviewer accepted a regression of one KPI on one run, and said why."""

    run = models.ForeignKey(BenchmarkRun, models.CASCADE, related_name="acknowledgements")
    kpi = models.CharField(max_length=40, choices=KPI_CHOICES)
    reason = models.TextField()
    user = models.ForeignKey(settings.AUTH_USER_MODEL, models.SET_NULL, null=True,
                             related_name="+")
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        ordering = ["created_at"]
        constraints = [
            models.UniqueConstraint(fields=["run", "kpi"], name="benchmark_ack_per_kpi")
        ]
