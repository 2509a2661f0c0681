"""Workloads (inference services, training jobs, batch work) and the GPUs they run on.

This is the first cut shared by the KPI and cost apps; the KPI work extends it.
"""

from __future__ import annotations

from fnmatch import fnmatchcase

from django.core.validators import MinValueValidator
from django.db import models
from django.utils import timezone
from django.utils.text import slugify

from greenops.teams.models import Team
from greenops.telemetry.models import Gpu, Host
from greenops.units import j_to_kwh


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
    # Inference services (greenops.advisor.fleet): the model served, as the inference
    # server's metrics label it (Triton's and vLLM's `model` label), so one model served on
    # different accelerators can be compared; and the p99 latency objective the replica advice
    # sizes for.
    served_model = models.CharField(
        max_length=200, blank=True,
        help_text="The model this service serves, as its metrics label it (e.g. llama-3-8b); "
                  "services with the same model are compared across accelerators")
    p99_target_ms = models.FloatField(
        null=True, blank=True, validators=[MinValueValidator(0.001)],
        help_text="p99 latency objective in ms; the advisor sizes replicas for it")
    # Matching rules: which GPU processes (greenops.telemetry.models.GpuProcess, the hosts'
    # latest snapshots) are this workload's. Only shown beside the configured GPUs; the
    # accounting keeps using hosts/gpus until someone adds a seen GPU explicitly.
    match_process = models.CharField(
        max_length=128, blank=True,
        help_text="Process name pattern as NVML lists it, e.g. tritonserver or python3* "
                  "(* and ? wildcards)")
    match_namespace = models.CharField(
        max_length=63, blank=True, help_text="Kubernetes namespace of its pods (dcgm-exporter)")
    match_pod_prefix = models.CharField(
        max_length=253, blank=True,
        help_text="Pod name prefix in that namespace, e.g. vllm-llama-7b- (blank: every pod)")
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

    def sharing(self) -> list[Workload]:
        """Other workloads of the team that run on at least one of this workload's GPUs."""
        mine = set(self.gpu_queryset().values_list("id", flat=True))
        return [w for w in Workload.objects.filter(team_id=self.team_id).exclude(id=self.id)
                if mine & set(w.gpu_queryset().values_list("id", flat=True))]

    @property
    def has_match_rule(self) -> bool:
        return bool(self.match_process or self.match_namespace)

    def matches(self, name: str, namespace: str, pod: str) -> bool:
        """Whether one GPU process (NVML name, or dcgm-exporter's namespace/pod) is this
        workload's: the name against the pattern (the whole name or its last path part), or the
        pod in the namespace starting with the prefix."""
        if self.match_process and name and (
                fnmatchcase(name, self.match_process)
                or fnmatchcase(name.rsplit("/", 1)[-1], self.match_process)):
            return True
        return bool(self.match_namespace and pod and namespace == self.match_namespace
                    and pod.startswith(self.match_pod_prefix))

    def gpu_queryset(self):
        """Every GPU this workload runs on: the linked GPUs plus all GPUs of linked hosts."""
        return Gpu.objects.filter(
            models.Q(id__in=self.gpus.values("id")) | models.Q(host__in=self.hosts.values("id"))
        ).distinct()


class TrainingJobQuerySet(models.QuerySet):
    def running(self) -> TrainingJobQuerySet:
        return self.filter(stopped_at__isnull=True)


class TrainingJob(models.Model):
    """One training run: started and stopped through the API (or the client's context manager).

    Its GPUs are fixed at start (named in the request, else the workload's), so relinking the
    workload later does not rewrite a finished job's energy. Accounting figures are computed
    from telemetry rollups by greenops.workloads.jobs and refreshed by the KPI beat task while late
    samples may still arrive.
    """

    team = models.ForeignKey(Team, models.CASCADE, related_name="training_jobs")
    workload = models.ForeignKey(Workload, models.CASCADE, related_name="training_jobs")
    name = models.CharField(max_length=200)
    # Optional client-chosen id: a retried start with the same id returns the same job.
    external_id = models.CharField(max_length=100, blank=True)
    gpus = models.ManyToManyField(Gpu, blank=True, related_name="training_jobs")
    started_at = models.DateTimeField()
    stopped_at = models.DateTimeField(null=True, blank=True)
    started_by = models.CharField(max_length=100, blank=True, help_text="token or host")
    # Accounting, all from rollups (see greenops.workloads.jobs). Null until first computed.
    gpu_energy_j = models.FloatField(null=True, blank=True)
    cpu_ram_energy_j = models.FloatField(null=True, blank=True)
    facility_energy_j = models.FloatField(null=True, blank=True)
    pue = models.FloatField(null=True, blank=True)
    pue_source = models.CharField(max_length=200, blank=True)
    intensity_g_per_kwh = models.FloatField(null=True, blank=True)
    intensity_source = models.CharField(max_length=300, blank=True)
    co2e_kg = models.FloatField(null=True, blank=True)
    cost_usd = models.FloatField(null=True, blank=True)
    cost_source = models.CharField(max_length=200, blank=True)
    gpu_hours = models.FloatField(null=True, blank=True)
    simulated = models.BooleanField(default=False)
    accounted_at = models.DateTimeField(null=True, blank=True)

    objects = TrainingJobQuerySet.as_manager()

    class Meta:
        ordering = ["-started_at"]
        constraints = [
            models.UniqueConstraint(
                fields=["team", "external_id"], name="training_job_external_id_per_team",
                condition=~models.Q(external_id=""),
            )
        ]

    def __str__(self) -> str:
        return self.name

    @property
    def facility_energy_kwh(self) -> float | None:
        return j_to_kwh(self.facility_energy_j)

    @property
    def running(self) -> bool:
        return self.stopped_at is None

    def duration_s(self, now=None) -> float:
        end = self.stopped_at or now or timezone.now()
        return max(0.0, (end - self.started_at).total_seconds())


class NamespaceTeam(models.Model):
    """A Kubernetes namespace on the hosts of ``owner`` whose pods' figures ``team`` sees
    (greenops.workloads.pods). Set by an admin of the hosts' team who is also a member of
    ``team``; a namespace without a row is "unmapped" and only the hosts' team sees it."""

    owner = models.ForeignKey(Team, models.CASCADE, related_name="namespace_mappings")
    namespace = models.CharField(max_length=63)
    team = models.ForeignKey(Team, models.CASCADE, related_name="mapped_namespaces")
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        ordering = ["namespace"]
        constraints = [models.UniqueConstraint(fields=["owner", "namespace"],
                                               name="namespace_team_once")]


class PodHour(models.Model):
    """One GPU's hour on a Kubernetes node, split between the pods that held it: the rollup the
    pods page and API read (built by greenops.workloads.pods.rollup). Each row is the pod's
    fraction of the hour (held_s / 3600) times the GPU-hour's IT energy, cost and CO2e from the
    energy, costs and carbon owners; the row with an empty pod is the time no pod held it, so a
    host's rows add up to the host's figures."""

    host = models.ForeignKey(Host, models.CASCADE, related_name="+")
    gpu = models.ForeignKey(Gpu, models.CASCADE, related_name="+")
    bucket = models.DateTimeField()
    namespace = models.CharField(max_length=253, blank=True)
    pod = models.CharField(max_length=253, blank=True)  # "": held by no pod
    container = models.CharField(max_length=253, blank=True)
    held_s = models.FloatField()
    energy_j = models.FloatField()  # IT energy: GPU + its share of the host's CPU/RAM
    facility_energy_j = models.FloatField()
    co2e_kg = models.FloatField()
    cost_usd = models.FloatField(null=True)  # null: the host has no price for the hour
    cost_note = models.CharField(max_length=200, blank=True)  # the price's source, or why none
    simulated = models.BooleanField(default=False)

    class Meta:
        constraints = [models.UniqueConstraint(
            fields=["gpu", "bucket", "namespace", "pod", "container"], name="pod_hour_once")]
        indexes = [models.Index(fields=["host", "bucket"], name="pod_hour_host_bucket")]
