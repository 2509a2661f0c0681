"""Raw samples by UTC day and minute rollups by ISO week, in PostgreSQL range partitions.

Works on a database that already holds data: each table is rebuilt `LIKE` itself (so it carries
whatever columns it has when this runs), its rows are copied into partitions covering every
period that has rows plus the next PARTITIONS_AHEAD_DAYS, and the new table takes the old name.
Writers wait while it runs (SHARE lock); readers do not. SQLite (embedded default): no
partitions; only the trigger that refuses raw samples older than what retention deleted.
See greenops/telemetry/partitions.py.
"""

from django.db import migrations, models


def forwards(apps, schema_editor):
    from greenops.telemetry import partitions

    with schema_editor.connection.cursor() as cursor:
        if schema_editor.connection.vendor == "postgresql":
            for spec in partitions.SPECS:
                if not partitions.is_partitioned(spec.table):
                    partitions.convert(spec, cursor)
        else:
            partitions.install_guard(partitions.RAW, cursor)


def backwards(apps, schema_editor):
    from greenops.telemetry import partitions

    with schema_editor.connection.cursor() as cursor:
        if schema_editor.connection.vendor == "postgresql":
            for spec in partitions.SPECS:
                if partitions.is_partitioned(spec.table):
                    partitions.unconvert(spec, cursor)
            cursor.execute("DROP FUNCTION IF EXISTS greenops_refuse_below_horizon()")
        else:
            cursor.execute(f"DROP TRIGGER IF EXISTS {partitions.RAW.table}_below_horizon")


class Migration(migrations.Migration):

    dependencies = [
        ("telemetry", "0005_bottleneck_metrics"),
    ]

    operations = [
        migrations.CreateModel(
            name="RetentionMark",
            fields=[
                ("table_name", models.CharField(max_length=63, primary_key=True, serialize=False)),
                ("dropped_before", models.DateTimeField(blank=True, null=True)),
                ("checked_at", models.DateTimeField(blank=True, null=True)),
                ("status", models.TextField(blank=True)),
            ],
        ),
        migrations.RunPython(forwards, backwards),
    ]
