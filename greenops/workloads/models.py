"""Workloads (inference services, training jobs, batch work) and the GPUs they run on.

This is the first cut shared by the KPI and cost apps; the KPI work extends it.
"""

from __future__ import annotations

from django.db import models
from django.utils.text import slugify

from greenops.teams.models import Team
from greenops.telemetry.models import Gpu, Host


class WorkloadKind(models.TextChoices):
    INFERENCE = "inference", "Inference service"
    TRAINING = "training", "Training"
    BATCH = "batch", "Batch inference"


class Workload(models.Model):
    team = models.ForeignKey(Team, models.CASCADE, related_name="workloads")
    name = models.CharField(max_length=100)
    slug = models.SlugField(max_length=100)
    kind = models.CharField(max_length=20, choices=WorkloadKind.choices)
    description = models.TextField(blank=True)
    # Linked capacity: whole hosts, or specific GPUs on shared hosts.
    hosts = models.ManyToManyField(Host, blank=True, related_name="workloads")
    gpus = models.ManyToManyField(Gpu, blank=True, related_name="workloads")
    # What the cost recommendations need to know about how the work tolerates interruption.
    interruptible = models.BooleanField(
        default=False, help_text="Can be stopped and resumed (checkpointed training, batch jobs)"
    )
    checkpoint_interval_min = models.PositiveIntegerField(null=True, blank=True)
    latency_critical = models.BooleanField(
        default=False, help_text="Serves user-facing requests with a latency objective"
    )
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        ordering = ["name"]
        constraints = [
            models.UniqueConstraint(fields=["team", "slug"], name="workload_slug_per_team")
        ]

    def __str__(self) -> str:
        return self.name

    def save(self, *args, **kwargs) -> None:
        if not self.slug:
            self.slug = slugify(self.name)[:100] or "workload"
        super().save(*args, **kwargs)

    def gpu_queryset(self):
        """Every GPU this workload runs on: the linked GPUs plus all GPUs of linked hosts."""
        return Gpu.objects.filter(
            models.Q(id__in=self.gpus.values("id")) | models.Q(host__in=self.hosts.values("id"))
        ).distinct()
