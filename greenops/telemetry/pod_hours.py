"""How long each Kubernetes pod held each GPU, hour by hour, from the hosts' process snapshots.

The agent sends, about once a minute, who holds each GPU (collectors/host_activity.py; the pods
come from the kubelet's PodResources API, collectors/podresources.py, or from dcgm-exporter).
The host keeps only its latest snapshot (GpuProcess). When a newer snapshot replaces it, the
time between the two -- at most HOLD_MAX_S, so a host that went quiet for an hour does not
book that hour to whoever held its GPUs before -- is credited to the pods of the older one,
split at hour boundaries, in equal parts between pods holding the same GPU at once (MIG slices,
time-sliced GPUs). A replayed or older snapshot never replaces a newer one, so no interval is
credited twice. Time no pod was seen holding a GPU (idle, NVML-only processes, a kubelet that
did not answer) is not credited: greenops.workloads.pods books it as held by no pod.
"""

from __future__ import annotations

import datetime as dt
from collections import defaultdict
from collections.abc import Iterable

from django.db.models import F

from greenops.telemetry.models import GpuPodHour, GpuProcess, Host
from greenops.windows import HOUR, floor_hour

HOLD_MAX_S = 180.0  # three snapshot intervals: one lost snapshot still leaves no hole


def hour_parts(start: dt.datetime, end: dt.datetime) -> list[tuple[dt.datetime, float]]:
    """[start, end) as (hour bucket, seconds in it)."""
    out, t = [], start
    while t < end:
        bucket = floor_hour(t)
        stop = min(bucket + HOUR, end)
        out.append((bucket, (stop - t).total_seconds()))
        t = stop
    return out


def one_snapshot_at_a_time(host: Host) -> None:
    """Lock the host's row until the caller's transaction ends: two batches of one host stored
    at once would otherwise both credit the time since the stored snapshot. The second waits
    here, then reads the snapshot the first stored (read committed)."""
    list(Host.objects.select_for_update().filter(pk=host.pk).values_list("pk", flat=True))


def credit(
    host: Host, previous: Iterable[GpuProcess], since: dt.datetime, until: dt.datetime
) -> int:
    """Credit [since, until) (cut at HOLD_MAX_S) to the pods of the previous snapshot's rows.
    Returns the rows written. Runs inside the caller's transaction."""
    end = min(until, since + dt.timedelta(seconds=HOLD_MAX_S))
    if end <= since:
        return 0
    holders: dict[int, set[tuple[str, str, str]]] = defaultdict(set)
    for p in previous:
        if p.pod:
            holders[p.gpu_id].add((p.namespace, p.pod, p.container))
    written = 0
    for gpu_id, pods in holders.items():
        for bucket, seconds in hour_parts(since, end):
            share = seconds / len(pods)
            for namespace, pod, container in sorted(pods):
                key = {
                    "gpu_id": gpu_id,
                    "bucket": bucket,
                    "namespace": namespace,
                    "pod": pod,
                    "container": container,
                }
                row, made = GpuPodHour.objects.select_for_update().get_or_create(
                    **key, defaults={"host": host, "held_s": share}
                )
                if not made:
                    GpuPodHour.objects.filter(id=row.id).update(held_s=F("held_s") + share)
                written += 1
    return written
