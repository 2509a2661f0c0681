"""Hosts, their GPUs, received batches, raw GPU samples and the rollups pages read.

Raw samples are keyed by their natural key (gpu, ts), so a replayed sample is never stored twice.
Rollups keep sums and counts rather than averages so that merging buckets stays exact.
"""

from __future__ import annotations

import datetime as dt
import uuid

from django.db import models
from django.utils import timezone

from greenops.teams.models import Team
from greenops.teams.signals import team_deleting
from greenops.tokens import hash_token, new_token

TOKEN_PREFIX = "gho_"
# A host that sent nothing for 2 minutes (12 of the agent's 10-second batches) is offline.
# A spool older than this on an online host is an outage being caught up, not a send in flight.
RECONNECTING_MIN_S = 60
ONLINE_WINDOW_S = 120


class PurchaseOption(models.TextChoices):
    ON_DEMAND = "on_demand", "On-demand"
    SPOT = "spot", "Spot"
    RESERVED = "reserved", "Reserved"
    SAVINGS_PLAN = "savings_plan", "Savings plan"
    ON_PREM = "on_prem", "On-premises"


class Host(models.Model):
    team = models.ForeignKey(Team, models.CASCADE, related_name="hosts")
    name = models.CharField(max_length=100)
    hostname = models.CharField(max_length=255, blank=True)
    country = models.CharField(max_length=3, blank=True, help_text="ISO 3166 alpha-3, e.g. USA")
    region = models.CharField(max_length=64, blank=True, help_text="Cloud region, e.g. us-east-1")
    provider = models.CharField(max_length=20, blank=True, help_text="aws, gcp, azure, on_prem")
    instance_type = models.CharField(max_length=64, blank=True)
    purchase_option = models.CharField(
        max_length=20, choices=PurchaseOption.choices, default=PurchaseOption.ON_DEMAND
    )
    token_hash = models.CharField(max_length=64, unique=True)
    token_prefix = models.CharField(max_length=12, blank=True)
    agent_version = models.CharField(max_length=32, blank=True)
    last_seen = models.DateTimeField(null=True, blank=True)
    created_at = models.DateTimeField(auto_now_add=True)
    # Issue 4: facts reported at enrollment, the agent's spool as of its last batch, lifecycle.
    cpu_model = models.CharField(max_length=255, blank=True)
    ram_total_mib = models.PositiveIntegerField(null=True, blank=True)
    facts_source = models.CharField(max_length=32, blank=True, help_text="config, aws-imds")
    spool_depth = models.PositiveIntegerField(null=True, blank=True)
    spool_oldest_age_s = models.FloatField(null=True, blank=True)
    spool_reported_at = models.DateTimeField(null=True, blank=True)
    revoked_at = models.DateTimeField(null=True, blank=True)
    removed_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        ordering = ["name"]
        constraints = [models.UniqueConstraint(fields=["team", "name"], name="host_name_per_team")]

    def __str__(self) -> str:
        return self.name

    def set_new_token(self) -> str:
        """Give the host a fresh token; only its hash is kept, so show the return value once."""
        token = new_token(TOKEN_PREFIX)
        self.token_hash = hash_token(token)
        self.token_prefix = token[:10]
        return token

    def is_online(self, now=None, window_s: int = ONLINE_WINDOW_S) -> bool:
        return self.seen_online(self.last_seen, now, window_s)

    def behind_s(self, now=None) -> float | None:
        """Seconds the host's data is behind while its agent drains a spool after an outage
        (its oldest batch waiting, as of its latest report), or None when it is keeping up.
        The page then says "reconnecting, N min behind" instead of a plain online, or the
        offline it showed while the agent's backoff ran."""
        if not self.is_online(now) or not self.spool_depth or self.spool_depth < 2:
            return None  # one batch waiting is the one being sent: normal
        age = self.spool_oldest_age_s
        return age if age is not None and age >= RECONNECTING_MIN_S else None

    @staticmethod
    def seen_online(
        last_seen: dt.datetime | None,
        now: dt.datetime | None = None,
        window_s: int = ONLINE_WINDOW_S,
    ) -> bool:
        """The one online rule, for a host or a host list's last_seen values: seen within the
        last window_s seconds (120 s ago is online, 121 s ago offline)."""
        if last_seen is None:
            return False
        return ((now or timezone.now()) - last_seen).total_seconds() <= window_s


class DeviceKind(models.TextChoices):
    """What an accelerator is (issue 33). Pages name a device by its kind's noun."""

    GPU = "gpu", "GPU"
    AI_ASIC = "ai-asic", "AI accelerator"  # AWS Inferentia, Trainium; Intel Gaudi
    EDGE_SOC = "edge-soc", "edge SoC"  # NVIDIA Jetson: GPU, CPU and RAM on one module


# Singular and plural nouns a page uses for a device of each kind.
DEVICE_NOUNS = {
    DeviceKind.GPU: ("GPU", "GPUs"),
    DeviceKind.AI_ASIC: ("accelerator", "accelerators"),
    DeviceKind.EDGE_SOC: ("edge module", "edge modules"),
}
VENDOR_NAMES = {"nvidia": "NVIDIA", "amd": "AMD", "aws": "AWS", "intel": "Intel"}


def device_kind_of(name: str) -> tuple[str, str]:
    """(kind, vendor) of a device from its model name alone: for rows registered before the
    agent sent both, and for agents (NVML, dcgm-exporter) that leave them out. A name that
    says nothing is a GPU of an unknown vendor (""): NVML's names before "NVIDIA ..." was
    prefixed (Tesla V100, Quadro ...) are matched by their product lines."""
    n = name.lower()
    if "inferentia" in n or "trainium" in n or "aws neuron" in n:
        return DeviceKind.AI_ASIC, "aws"
    if "gaudi" in n:
        return DeviceKind.AI_ASIC, "intel"
    if "jetson" in n or "orin" in n or "xavier" in n or "tegra" in n:
        return DeviceKind.EDGE_SOC, "nvidia"
    if "amd" in n or "instinct" in n or "radeon" in n or n.startswith("mi") and n[2:3].isdigit():
        return DeviceKind.GPU, "amd"
    if any(w in n for w in ("nvidia", "tesla", "quadro", "geforce", "rtx", "titan")):
        return DeviceKind.GPU, "nvidia"
    return DeviceKind.GPU, ""


def devices_noun(kinds, plural: bool = True) -> str:
    """The noun for a set of devices: "GPUs" when all are GPUs, "accelerators" when all are
    AI ASICs..., "devices" for a mix (and for none: a host not yet reporting)."""
    kinds = set(kinds)
    nouns = (
        DEVICE_NOUNS.get(kinds.pop(), ("device", "devices"))
        if len(kinds) == 1
        else ("device", "devices")
    )
    return nouns[1] if plural else nouns[0]


class Gpu(models.Model):
    """One accelerator of a host: an NVIDIA or AMD GPU, an AWS Neuron device, a Jetson module
    (``kind``). The name stays Gpu: it is the table every rollup and workload points at."""

    host = models.ForeignKey(Host, models.CASCADE, related_name="gpus")
    index = models.PositiveSmallIntegerField()
    uuid = models.CharField(max_length=96, blank=True)
    name = models.CharField(max_length=128, blank=True)
    power_limit_w = models.FloatField(null=True, blank=True)
    memory_total_mib = models.FloatField(null=True, blank=True)
    # NVML's nvmlDeviceGetMaxClockInfo; null where the agent could not read it.
    max_sm_clock_mhz = models.FloatField(null=True, blank=True)
    max_mem_clock_mhz = models.FloatField(null=True, blank=True)
    kind = models.CharField(max_length=16, choices=DeviceKind.choices, default=DeviceKind.GPU)
    vendor = models.CharField(max_length=32, blank=True, help_text="nvidia, amd, aws, intel")

    class Meta:
        ordering = ["host_id", "index"]
        constraints = [models.UniqueConstraint(fields=["host", "index"], name="gpu_index_per_host")]

    def __str__(self) -> str:
        return f"{self.host.name}/gpu{self.index}"

    def save(self, *args, **kwargs) -> None:
        # A row made without the agent's inventory (admin, the demo, a factory) is labelled
        # from its model name as the inventory would label it, so the next inventory with the
        # same GPUs finds nothing changed (a Gpu save makes every stored cost figure stale).
        if not self.vendor and self.name and kwargs.get("update_fields") is None:
            derived_kind, self.vendor = device_kind_of(self.name)
            if self.kind == DeviceKind.GPU:
                self.kind = derived_kind
        super().save(*args, **kwargs)

    @property
    def noun(self) -> str:
        """ "GPU", "accelerator" or "edge module": what a page calls this device."""
        return DEVICE_NOUNS.get(self.kind, DEVICE_NOUNS[DeviceKind.GPU])[0]

    @property
    def label(self) -> str:
        """The device as a page names it: "GPU 0", "accelerator 1"."""
        return f"{self.noun} {self.index}"

    @property
    def vendor_name(self) -> str:
        return VENDOR_NAMES.get(self.vendor, self.vendor)


class IngestBatch(models.Model):
    """One batch as the agent sent it. Kept until processed so a lost queue message loses nothing;
    its id makes a resent batch a no-op."""

    class Status(models.TextChoices):
        PENDING = "pending"
        DONE = "done"
        FAILED = "failed"

    id = models.UUIDField(primary_key=True, default=uuid.uuid4)
    host = models.ForeignKey(Host, models.CASCADE, related_name="batches")
    received_at = models.DateTimeField(default=timezone.now, db_index=True)
    n_samples = models.PositiveIntegerField()
    payload = models.BinaryField()  # request body, gzip if gzip_encoded; emptied once stored
    gzip_encoded = models.BooleanField(default=False)
    status = models.CharField(max_length=10, choices=Status.choices, default=Status.PENDING)
    processed_at = models.DateTimeField(null=True, blank=True)
    inserted = models.PositiveIntegerField(null=True, blank=True)
    error = models.TextField(blank=True)

    class Meta:
        indexes = [
            models.Index(
                fields=["received_at"],
                name="batch_pending_idx",
                condition=models.Q(status="pending"),
            )
        ]


class EnergyMethod(models.IntegerChoices):
    # The device's own energy counter: NVML's (mJ), dcgm-exporter's, amd-smi's accumulator.
    COUNTER = 1, "hardware energy counter"
    POWER = 2, "integrated power"
    COUNTER_GAP = 3, "hardware energy counter across an agent restart"


class GpuSample(models.Model):
    """A raw reading. Natural key (gpu, ts) is the primary key: replays are no-ops."""

    pk = models.CompositePrimaryKey("gpu_id", "ts")
    # No separate index on gpu: the (gpu, ts|bucket) primary key already leads with it.
    gpu = models.ForeignKey(
        Gpu, models.CASCADE, db_constraint=False, db_index=False, related_name="+"
    )
    ts = models.DateTimeField()
    util_pct = models.FloatField(null=True)
    mem_used_mib = models.FloatField(null=True)
    power_w = models.FloatField(null=True)
    energy_mj = models.BigIntegerField(null=True)  # raw NVML total-energy counter
    energy_j = models.FloatField(null=True)  # energy over the interval ending at ts
    energy_method = models.SmallIntegerField(choices=EnergyMethod.choices, null=True)
    temp_c = models.FloatField(null=True)
    sm_clock_mhz = models.FloatField(null=True)
    simulated = models.BooleanField(default=False)
    # Bottleneck metrics (issue 14); null = the GPU or agent did not report it.
    mem_util_pct = models.FloatField(null=True)
    mem_clock_mhz = models.FloatField(null=True)
    pcie_tx_kib_s = models.FloatField(null=True)
    pcie_rx_kib_s = models.FloatField(null=True)
    throttle_reasons = models.BigIntegerField(null=True)  # nvmlClocksThrottleReason* bits
    power_limit_w = models.FloatField(null=True)  # enforced limit at the time of the sample
    # DCGM profiling fields (dcgm-exporter), % of cycles; null = not reported.
    sm_active_pct = models.FloatField(null=True)  # an SM had at least one warp
    sm_occupancy_pct = models.FloatField(null=True)  # resident warps / maximum
    tensor_active_pct = models.FloatField(null=True)  # tensor (HMMA) pipe busy
    dram_active_pct = models.FloatField(null=True)  # memory interface busy
    nvlink_tx_kib_s = models.FloatField(null=True)  # all links, KiB/s (DCGM or NVML)
    nvlink_rx_kib_s = models.FloatField(null=True)


class RollupFields(models.Model):
    """Per-bucket aggregates. Sums + counts, so any coarser bucket is an exact merge."""

    # No separate index on gpu: the (gpu, ts|bucket) primary key already leads with it.
    gpu = models.ForeignKey(
        Gpu, models.CASCADE, db_constraint=False, db_index=False, related_name="+"
    )
    # Indexed on its own too: the team page's live tail reads the newest bucket or two of every
    # GPU of a team, which bucket-first is one short range scan, not a descent of the primary
    # key per GPU (1,000 of them for a 1,000-GPU team: most of a page view's time).
    bucket = models.DateTimeField(db_index=True)
    samples = models.IntegerField(default=0)
    util_sum = models.FloatField(default=0)
    util_n = models.IntegerField(default=0)
    util_max = models.FloatField(null=True)
    power_sum_w = models.FloatField(default=0)
    power_n = models.IntegerField(default=0)
    power_max_w = models.FloatField(null=True)
    mem_used_max_mib = models.FloatField(null=True)
    temp_max_c = models.FloatField(null=True)
    energy_j = models.FloatField(default=0)
    simulated_samples = models.IntegerField(default=0)
    # Bottleneck aggregates (issue 14). A count of 0 means "not reported", never "zero".
    mem_util_sum = models.FloatField(default=0)
    mem_util_n = models.IntegerField(default=0)
    pcie_tx_sum_kib_s = models.FloatField(default=0)
    pcie_rx_sum_kib_s = models.FloatField(default=0)
    pcie_n = models.IntegerField(default=0)  # samples with both directions reported
    throttle_n = models.IntegerField(default=0)  # samples with throttle reasons reported
    power_capped_samples = models.IntegerField(default=0)  # SW power cap or HW power brake
    thermal_samples = models.IntegerField(default=0)  # SW or HW thermal slowdown
    power_limit_min_w = models.FloatField(null=True)
    # Profiling aggregates (DCGM): mean = sum / n; n = 0 means not reported.
    sm_active_sum = models.FloatField(default=0)
    sm_active_n = models.IntegerField(default=0)
    sm_occupancy_sum = models.FloatField(default=0)
    sm_occupancy_n = models.IntegerField(default=0)
    tensor_active_sum = models.FloatField(default=0)
    tensor_active_n = models.IntegerField(default=0)
    dram_active_sum = models.FloatField(default=0)
    dram_active_n = models.IntegerField(default=0)
    nvlink_tx_sum_kib_s = models.FloatField(default=0)
    nvlink_rx_sum_kib_s = models.FloatField(default=0)
    nvlink_n = models.IntegerField(default=0)  # samples with both directions reported
    # Clocks, to compare with the GPU's maximums (Gpu.max_*_clock_mhz).
    sm_clock_sum_mhz = models.FloatField(default=0)
    sm_clock_n = models.IntegerField(default=0)
    mem_clock_sum_mhz = models.FloatField(default=0)
    mem_clock_n = models.IntegerField(default=0)

    class Meta:
        abstract = True


class GpuMinute(RollupFields):
    pk = models.CompositePrimaryKey("gpu_id", "bucket")


class MinuteCounts(models.Model):
    """Per hour or day: the minute rollups in it with a utilisation reported, and of those the
    idle ones (mean utilisation under store.IDLE_UTIL_PCT), kept up to date by the ingest
    statement (greenops.telemetry.store) so idle cost reads hours, not 60x as many minutes."""

    util_minutes = models.IntegerField(default=0, db_default=0)
    idle_minutes = models.IntegerField(default=0, db_default=0)

    class Meta:
        abstract = True


class GpuHour(RollupFields, MinuteCounts):
    pk = models.CompositePrimaryKey("gpu_id", "bucket")


class GpuDay(RollupFields, MinuteCounts):
    """UTC days: a 90-day page reads 90 rows per GPU instead of 2,160 hours."""

    pk = models.CompositePrimaryKey("gpu_id", "bucket")


ROLLUPS = {"minute": GpuMinute, "hour": GpuHour, "day": GpuDay}


def delete_measurements(hosts: models.QuerySet) -> int:
    """Delete the raw samples and GPU rollups of these hosts' GPUs; returns the number of raw
    samples deleted. They are keyed by GPU id without a database foreign key (so ingest never
    pays for one), so deleting a host or a team does not cascade to them: the one path that
    deletes a host's history, used by host deletion and team deletion alike."""
    gpu_ids = list(Gpu.objects.filter(host__in=hosts).values_list("id", flat=True))
    deleted, _ = GpuSample.objects.filter(gpu_id__in=gpu_ids).delete()
    for model in ROLLUPS.values():
        model.objects.filter(gpu_id__in=gpu_ids).delete()
    return deleted


def _delete_team_measurements(sender, team: Team, **kwargs) -> int:
    """teams.membership.delete_team: the team's hosts' samples and rollups."""
    return delete_measurements(team.hosts.all())


team_deleting.connect(_delete_team_measurements, dispatch_uid="telemetry-delete-team")


# --- Host CPU and RAM energy (codecarbon on the agent), per hour -------------------------------

MIXED = "mixed"


class HostEnergyHour(models.Model):
    """Host CPU and RAM energy per hour, rolled up by greenops.carbon.host_energy from the
    agent's HostEnergySample rows. Methods say how the figures were obtained ("rapl", "tdp",
    "constant", ...); "mixed" when the hour's samples disagree. Here rather than in carbon
    because greenops.energy (below carbon) reads it; the table keeps its first name."""

    pk = models.CompositePrimaryKey("host_id", "bucket")
    host = models.ForeignKey(Host, models.CASCADE, db_index=False, related_name="+")
    bucket = models.DateTimeField()  # hour start, UTC
    cpu_energy_j = models.FloatField(default=0)
    ram_energy_j = models.FloatField(default=0)
    cpu_method = models.CharField(max_length=16)
    ram_method = models.CharField(max_length=16)
    samples = models.IntegerField(default=0)
    simulated_samples = models.IntegerField(default=0)

    class Meta:
        db_table = "carbon_hostenergyhour"  # created by carbon's 0001; moved in state only


# --- Host activity (issue 14): what the host around the GPUs is doing ------------------------


class HostSample(models.Model):
    """One reading of the host's CPU, network and disk over ``interval_s`` seconds ending at
    ``ts`` (collectors/host_activity.py). Null = not readable on that host, never 0."""

    pk = models.CompositePrimaryKey("host_id", "ts")
    host = models.ForeignKey(Host, models.CASCADE, related_name="+")
    ts = models.DateTimeField()
    interval_s = models.FloatField()
    cpu_util_pct = models.FloatField(null=True)  # % of all CPUs busy
    net_rx_bytes_s = models.FloatField(null=True)  # physical interfaces, summed
    net_tx_bytes_s = models.FloatField(null=True)
    disk_read_bytes_s = models.FloatField(null=True)  # whole physical disks, summed
    disk_write_bytes_s = models.FloatField(null=True)


class HostHour(models.Model):
    """A host's hour of activity. Time-weighted: each figure keeps the seconds it was measured
    over, so mean = sum / seconds (a rate divides by the time actually measured), and hours
    merge exactly. ``*_s`` = 0 means not reported."""

    pk = models.CompositePrimaryKey("host_id", "bucket")
    host = models.ForeignKey(Host, models.CASCADE, related_name="+")
    bucket = models.DateTimeField()
    samples = models.IntegerField(default=0)
    cpu_s = models.FloatField(default=0)  # seconds with a CPU figure
    cpu_busy_s = models.FloatField(default=0)  # sum of util/100 x interval: mean = busy / cpu_s
    cpu_util_max = models.FloatField(null=True)
    net_s = models.FloatField(default=0)  # seconds with both network directions
    net_rx_bytes = models.FloatField(default=0)
    net_tx_bytes = models.FloatField(default=0)
    net_rx_max_bytes_s = models.FloatField(null=True)
    net_tx_max_bytes_s = models.FloatField(null=True)
    disk_s = models.FloatField(default=0)  # seconds with both disk directions
    disk_read_bytes = models.FloatField(default=0)
    disk_write_bytes = models.FloatField(default=0)
    disk_read_max_bytes_s = models.FloatField(null=True)
    disk_write_max_bytes_s = models.FloatField(null=True)


class GpuProcess(models.Model):
    """Who held a GPU at the host's latest process snapshot: an NVML compute process (pid,
    name, GPU memory) or a Kubernetes pod from dcgm-exporter. Replaced at each snapshot."""

    host = models.ForeignKey(Host, models.CASCADE, related_name="gpu_processes")
    gpu = models.ForeignKey(Gpu, models.CASCADE, related_name="processes")
    seen_at = models.DateTimeField()
    pid = models.IntegerField(null=True)
    name = models.CharField(max_length=128, blank=True)
    used_memory_mib = models.FloatField(null=True)  # null: the driver did not say
    namespace = models.CharField(max_length=253, blank=True)
    pod = models.CharField(max_length=253, blank=True)
    container = models.CharField(max_length=253, blank=True)

    class Meta:
        ordering = ["gpu_id", "pid", "pod"]


class GpuPodHour(models.Model):
    """Seconds a Kubernetes pod's container held a GPU within one hour, credited from the
    host's process snapshots (greenops.telemetry.pod_hours): the time from one snapshot to the
    next goes to the pods of the earlier one, in equal parts when several hold the GPU at once.
    What greenops.workloads.pods turns into each pod's joules, dollars and CO2e."""

    gpu = models.ForeignKey(Gpu, models.CASCADE, related_name="+")
    host = models.ForeignKey(Host, models.CASCADE, related_name="+")
    bucket = models.DateTimeField()
    namespace = models.CharField(max_length=253)
    pod = models.CharField(max_length=253)
    container = models.CharField(max_length=253, blank=True)
    held_s = models.FloatField(default=0.0)

    class Meta:
        constraints = [models.UniqueConstraint(
            fields=["gpu", "bucket", "namespace", "pod", "container"], name="gpu_pod_hour_once")]
        indexes = [models.Index(fields=["host", "bucket"], name="gpu_pod_hour_host")]


# --- Enrollment and host lifecycle (issue 4) ----------------------------------------------

ENROLL_TOKEN_PREFIX = "gen_"


class EnrollmentToken(models.Model):
    """A single-use, short-lived secret that `greenops-agent enroll` trades for a host token.

    Shown once on the Add host page; only its hash is kept. Claimed with a conditional update,
    so two agents racing with the same token get one host between them.
    """

    team = models.ForeignKey(Team, models.CASCADE, related_name="enrollment_tokens")
    token_hash = models.CharField(max_length=64, unique=True)
    token_prefix = models.CharField(max_length=12)
    created_by = models.ForeignKey(
        "auth.User", models.SET_NULL, null=True, blank=True, related_name="+"
    )
    created_at = models.DateTimeField(auto_now_add=True)
    expires_at = models.DateTimeField()
    used_at = models.DateTimeField(null=True, blank=True)
    host = models.ForeignKey(
        Host, models.SET_NULL, null=True, blank=True, related_name="enrollment_tokens"
    )

    class Meta:
        ordering = ["-created_at"]

    def __str__(self) -> str:
        return f"{self.token_prefix}… for {self.team}"


class LateHour(models.Model):
    """An hour of a team's telemetry that changed after the KPI rollup's regular lookback had
    passed it (an agent replaying its spool after an outage, a worker that was down). The KPI
    rollup rebuilds these hours and deletes the rows; telemetry never imports the KPI app."""

    team = models.ForeignKey(Team, models.CASCADE, related_name="+")
    hour = models.DateTimeField()

    class Meta:
        constraints = [models.UniqueConstraint(fields=["team", "hour"], name="late_hour_once")]


class RetentionMark(models.Model):
    """How far retention has removed a partitioned table's rows (greenops.telemetry.partitions).

    Rows older than `dropped_before` are refused by a trigger: once their period is dropped, a
    replayed batch would otherwise store them again and fold them into the rollups twice.
    `status` says what the last retention run did or why it refused a drop."""

    table_name = models.CharField(max_length=63, primary_key=True)
    dropped_before = models.DateTimeField(null=True, blank=True)
    checked_at = models.DateTimeField(null=True, blank=True)
    status = models.TextField(blank=True)

    def __str__(self) -> str:
        return f"{self.table_name}: {self.status or 'not checked'}"


# --- Fleet rollups (greenops.telemetry.fleetroll): the team charts' closed display buckets ------


class FleetBucket(models.Model):
    """One closed display bucket of a team's fleet chart (greenops.telemetry.fleet): the figures
    the chart draws, computed from the per-GPU rollups by the same statement the live path runs,
    so a page reads at most ~300 of these rows instead of up to 1.4 M rollup rows. Filled by
    dashboards.tasks.fill_fleet_rollups (greenops.telemetry.fleetroll.fill)."""

    team = models.ForeignKey(Team, models.CASCADE, related_name="+")
    step_s = models.IntegerField()  # the display step (a grid: bucket is a multiple of it)
    bucket = models.DateTimeField()
    # Across GPUs: utilisation mean, p10, p90 of the GPUs' bucket means (None: none reported);
    # fleet power = sum of the GPUs' mean power, over power_gpus GPUs that reported power.
    util_mean = models.FloatField(null=True)
    util_p10 = models.FloatField(null=True)
    util_p90 = models.FloatField(null=True)
    power_w = models.FloatField(null=True)
    power_gpus = models.IntegerField(default=0)
    # The sums behind the range totals (added over buckets, as the live path adds them).
    util_sum = models.FloatField(default=0)
    util_n = models.BigIntegerField(default=0)
    power_sum_w = models.FloatField(default=0)
    power_n = models.BigIntegerField(default=0)
    energy_j = models.FloatField(default=0)
    simulated_samples = models.BigIntegerField(default=0)
    samples = models.BigIntegerField(default=0)
    # GPUs with a rollup row in the bucket: a bitmap (bit = Gpu.id, little-endian) whose union
    # over buckets is the range's "GPUs reporting"; n_gpus and gpu_id_sum with samples are the
    # fingerprint a fill run compares with the rollups to find buckets late data changed.
    gpu_bits = models.BinaryField(default=b"")
    n_gpus = models.IntegerField(default=0)
    gpu_id_sum = models.BigIntegerField(default=0)
    # Energy per host: Host ids (int32) and their joules (float64), little-endian, in the same
    # order: ~300 buckets x 125 hosts decode in microseconds (as JSON they took ~40 ms a page).
    host_ids = models.BinaryField(default=b"")
    host_energy_j = models.BinaryField(default=b"")

    class Meta:
        constraints = [
            models.UniqueConstraint(fields=["team", "step_s", "bucket"], name="fleet_bucket_once")
        ]


class FleetFill(models.Model):
    """How far a team's fleet rollups at one display step are stored: every bucket in
    [start, until) has its FleetBucket row (empty buckets included); filled_at is when the run
    that stored them started (the next run rebuilds from late.reach(filled_at))."""

    team = models.ForeignKey(Team, models.CASCADE, related_name="+")
    step_s = models.IntegerField()
    start = models.DateTimeField()
    until = models.DateTimeField()
    filled_at = models.DateTimeField()
    duration_s = models.FloatField(default=0)  # the last run's time for this team and step
    # The open bucket (the one starting at `until`) summed per GPU over [until, open_through),
    # its complete rollup steps at the run: open_cells FleetOpenCell rows. None: not stored
    # (a grid whose display step is its rollup's own step has no partial bucket to keep).
    open_through = models.DateTimeField(null=True)
    open_cells = models.IntegerField(default=0)

    class Meta:
        constraints = [models.UniqueConstraint(fields=["team", "step_s"], name="fleet_fill_once")]


class FleetOpenCell(models.Model):
    """One GPU's rollup sums over the complete part of a team's open display bucket
    ([bucket, through), bucket = FleetFill.until when written), stored by each fill run so that
    a page view sums only the rollup rows after `through` for that bucket: at 10,000 GPUs the
    day chart's open 5-minute bucket was up to 50,000 minute rows per view, read again by every
    view (issue 35). Rewritten whole by every run, as the stored buckets of the lookback are,
    so a late batch reaches it at the next run; the previous run's cells are kept until the
    run after, for a page that read FleetFill just before a run replaced them."""

    team = models.ForeignKey(Team, models.CASCADE, related_name="+", db_index=False)
    step_s = models.IntegerField()
    bucket = models.DateTimeField()
    through = models.DateTimeField()
    # No foreign key to check for each row rewritten every run: the page joins the GPUs, so a
    # deleted one drops out.
    gpu_id = models.BigIntegerField()
    # The sums fleet._CELL_SUMS takes from the rollups, in the rollups' types.
    util_sum = models.FloatField()
    util_n = models.IntegerField()
    power_sum_w = models.FloatField()
    power_n = models.IntegerField()
    energy_j = models.FloatField()
    simulated_samples = models.IntegerField()
    samples = models.IntegerField()

    class Meta:
        indexes = [models.Index(fields=["team", "step_s", "bucket", "through"],
                                name="fleet_open_cell_gen")]
