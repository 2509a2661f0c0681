"""KPI team rows keep the host-hours measured in their bucket (KpiRollup.hosts_measured), so a
period's coverage reads one row per bucket instead of every GPU-hour of the team. Existing team
rows are filled once here from the GPU-hour rollups, as queries.host_hours counted them."""

from collections import defaultdict
from datetime import timedelta

from django.db import migrations, models

HOUR = timedelta(hours=1)


def _floor_hour(t):
    return t.replace(minute=0, second=0, microsecond=0)


def fill(apps, schema_editor):
    KpiRollup = apps.get_model("kpis", "KpiRollup")
    GpuHour = apps.get_model("telemetry", "GpuHour")
    Host = apps.get_model("telemetry", "Host")
    teams = KpiRollup.objects.filter(workload__isnull=True).values_list(
        "team_id", flat=True).distinct()
    for team_id in list(teams):
        hosts = {h.id: h for h in Host.objects.filter(team_id=team_id)}
        measured: dict = defaultdict(int)
        outside: dict = defaultdict(int)
        pairs = (GpuHour.objects.filter(gpu__host__team_id=team_id, samples__gt=0)
                 .values_list("gpu__host_id", "bucket").distinct())
        for host_id, bucket in pairs.iterator(chunk_size=10000):
            measured[bucket] += 1
            h = hosts[host_id]
            if ((h.created_at is not None and bucket < _floor_hour(h.created_at))
                    or (h.removed_at is not None and bucket >= h.removed_at)):
                outside[bucket] += 1
        rows = list(KpiRollup.objects.filter(team_id=team_id, workload__isnull=True))
        for r in rows:
            if r.period == "hour":
                r.hosts_measured, r.hosts_unenrolled = measured[r.bucket], outside[r.bucket]
        # A day row is the exact merge of its hours (rollup.rollup_day): the same sums.
        day_hours: dict = defaultdict(list)
        for r in rows:
            if r.period == "hour":
                day_hours[r.bucket.replace(hour=0)].append(r)
        for r in rows:
            if r.period == "day":
                hours = day_hours[r.bucket]
                r.hosts_measured = sum(h.hosts_measured for h in hours)
                r.hosts_unenrolled = sum(h.hosts_unenrolled for h in hours)
        KpiRollup.objects.bulk_update(rows, ["hosts_measured", "hosts_unenrolled"],
                                      batch_size=2000)


class Migration(migrations.Migration):

    dependencies = [
        ('kpis', '0007_team_inference_figures'),
        ('telemetry', '0016_device_kind_vendor'),
    ]

    operations = [
        migrations.AddField(
            model_name='kpirollup',
            name='hosts_measured',
            field=models.IntegerField(null=True),
        ),
        migrations.AddField(
            model_name='kpirollup',
            name='hosts_unenrolled',
            field=models.IntegerField(null=True),
        ),
        migrations.RunPython(fill, migrations.RunPython.noop),
    ]
