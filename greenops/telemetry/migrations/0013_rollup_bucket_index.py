# The rollups indexed on bucket alone, beside the (gpu_id, bucket) primary key: the team page's
# live tail (the newest bucket or two of every GPU of a team) becomes one range scan instead of a
# primary-key descent per GPU. On a partitioned table (minute rollups) PostgreSQL builds the index
# on every partition and on each one created later. The build holds writes to the table (not
# reads) while it runs: batches accepted meanwhile wait as pending rows and are stored after.

from django.db import migrations, models


class Migration(migrations.Migration):

    dependencies = [
        ('telemetry', '0012_fleet_host_energy_binary'),
    ]

    operations = [
        migrations.AlterField(
            model_name='gpuday',
            name='bucket',
            field=models.DateTimeField(db_index=True),
        ),
        migrations.AlterField(
            model_name='gpuhour',
            name='bucket',
            field=models.DateTimeField(db_index=True),
        ),
        migrations.AlterField(
            model_name='gpuminute',
            name='bucket',
            field=models.DateTimeField(db_index=True),
        ),
    ]
