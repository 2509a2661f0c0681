# The rollups indexed on bucket alone, beside the (gpu_id, bucket) primary key: the team page's
# live tail (the newest bucket or two of every GPU of a team) becomes one range scan instead of a
# primary-key descent per GPU.
#
# Built without holding ingest: a plain CREATE INDEX blocks writes to the table while it runs
# (minutes for a large fleet's minute rollups, while every ingest group waits). On PostgreSQL
# each index is built CONCURRENTLY instead -- for the partitioned minute rollups, the parent's
# index is created ON ONLY the parent, each partition's built concurrently and attached (then
# every partition created later gets it too). SQLite (the embedded default) builds it plainly.

from django.db import migrations, models

# Django's own names for these indexes (what AlterField(db_index=True) would create).
INDEXES = {
    "telemetry_gpuminute": "telemetry_gpuminute_bucket_447d4465",
    "telemetry_gpuhour": "telemetry_gpuhour_bucket_928bce03",
    "telemetry_gpuday": "telemetry_gpuday_bucket_1eb89e81",
}

_UNINDEXED_PARTITIONS = """
    SELECT c.relname FROM pg_inherits i JOIN pg_class c ON c.oid = i.inhrelid
    WHERE i.inhparent = %s::regclass AND NOT EXISTS (
        SELECT 1 FROM pg_inherits ii JOIN pg_index x ON x.indexrelid = ii.inhrelid
        WHERE ii.inhparent = %s::regclass AND x.indrelid = c.oid)
    ORDER BY 1
"""


def _q(name: str) -> str:
    return '"' + name.replace('"', '""') + '"'


def forwards(apps, schema_editor):
    connection = schema_editor.connection
    with connection.cursor() as cursor:
        for table, name in INDEXES.items():
            if connection.vendor != "postgresql":
                cursor.execute(f"CREATE INDEX IF NOT EXISTS {_q(name)} ON {_q(table)} (bucket)")
                continue
            cursor.execute("SELECT relkind FROM pg_class WHERE oid = %s::regclass", [table])
            if cursor.fetchone()[0] != "p":
                cursor.execute(
                    f"CREATE INDEX CONCURRENTLY IF NOT EXISTS {_q(name)} ON {_q(table)} (bucket)")
                continue
            cursor.execute(f"CREATE INDEX IF NOT EXISTS {_q(name)} ON ONLY {_q(table)} (bucket)")
            cursor.execute(_UNINDEXED_PARTITIONS, [table, name])
            for (partition,) in cursor.fetchall():
                index = f"{partition}_bucket_idx"
                cursor.execute(f"CREATE INDEX CONCURRENTLY IF NOT EXISTS {_q(index)} "
                               f"ON {_q(partition)} (bucket)")
                cursor.execute(f"ALTER INDEX {_q(name)} ATTACH PARTITION {_q(index)}")


def backwards(apps, schema_editor):
    with schema_editor.connection.cursor() as cursor:
        for name in INDEXES.values():  # a partitioned index takes its partitions' with it
            cursor.execute(f"DROP INDEX IF EXISTS {_q(name)}")


class Migration(migrations.Migration):
    atomic = False  # CREATE INDEX CONCURRENTLY cannot run inside a transaction

    dependencies = [
        ("telemetry", "0012_fleet_host_energy_binary"),
    ]

    operations = [
        migrations.SeparateDatabaseAndState(
            state_operations=[
                migrations.AlterField(model_name=model, name="bucket",
                                      field=models.DateTimeField(db_index=True))
                for model in ("gpuday", "gpuhour", "gpuminute")
            ],
            database_operations=[migrations.RunPython(forwards, backwards)],
        ),
    ]
