"""Minute counts in the hour and day rollups (util_minutes, idle_minutes), counted from the
minute rollups already stored (a frozen copy of greenops.telemetry.store's definition: a minute
with a utilisation reported is idle when its mean is under 5 %). Hours whose minute rollups
retention already removed keep 0, as the minute count read before this column did."""

from django.db import migrations, models

IDLE_UTIL_PCT = 5.0
PG = [f"""
    UPDATE telemetry_gpuhour h SET util_minutes = c.n, idle_minutes = c.idle
    FROM (SELECT gpu_id, date_trunc('hour', bucket) AS hour, count(*) AS n,
                 count(*) FILTER (WHERE util_sum < util_n * {IDLE_UTIL_PCT}) AS idle
          FROM telemetry_gpuminute WHERE util_n > 0 GROUP BY 1, 2) c
    WHERE h.gpu_id = c.gpu_id AND h.bucket = c.hour
""", """
    UPDATE telemetry_gpuday d SET util_minutes = c.n, idle_minutes = c.idle
    FROM (SELECT gpu_id, date_trunc('day', bucket) AS day, sum(util_minutes) AS n,
                 sum(idle_minutes) AS idle
          FROM telemetry_gpuhour WHERE util_minutes > 0 GROUP BY 1, 2) c
    WHERE d.gpu_id = c.gpu_id AND d.bucket = c.day
"""]
SQLITE = [f"""
    UPDATE {table} SET
        util_minutes = (SELECT count(*) FROM telemetry_gpuminute m
                        WHERE m.gpu_id = {table}.gpu_id AND m.util_n > 0
                        AND strftime('{fmt}', m.bucket) = {table}.bucket),
        idle_minutes = (SELECT count(*) FROM telemetry_gpuminute m
                        WHERE m.gpu_id = {table}.gpu_id AND m.util_n > 0
                        AND m.util_sum < m.util_n * {IDLE_UTIL_PCT}
                        AND strftime('{fmt}', m.bucket) = {table}.bucket)
""" for table, fmt in (("telemetry_gpuhour", "%Y-%m-%d %H:00:00"),
                       ("telemetry_gpuday", "%Y-%m-%d 00:00:00"))]


def backfill(apps, schema_editor):
    conn = schema_editor.connection
    with conn.cursor() as cursor:
        if conn.vendor == "postgresql":
            cursor.execute("SET LOCAL TIME ZONE 'UTC'")  # date_trunc of UTC hours and days
        for sql in PG if conn.vendor == "postgresql" else SQLITE:
            cursor.execute(sql)


class Migration(migrations.Migration):

    dependencies = [
        ('telemetry', '0009_host_activity'),
    ]

    operations = [
        migrations.AddField(
            model_name='gpuday',
            name='idle_minutes',
            field=models.IntegerField(default=0, db_default=0),
        ),
        migrations.AddField(
            model_name='gpuday',
            name='util_minutes',
            field=models.IntegerField(default=0, db_default=0),
        ),
        migrations.AddField(
            model_name='gpuhour',
            name='idle_minutes',
            field=models.IntegerField(default=0, db_default=0),
        ),
        migrations.AddField(
            model_name='gpuhour',
            name='util_minutes',
            field=models.IntegerField(default=0, db_default=0),
        ),
        migrations.RunPython(backfill, migrations.RunPython.noop),
    ]
