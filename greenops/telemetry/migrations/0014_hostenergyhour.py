# HostEnergyHour moves from the carbon app to telemetry in Django's state only: the table
# (carbon_hostenergyhour) and every row stay where they are. carbon's 0004 deletes the model from
# carbon's state, after this one.

import django.db.models.deletion
from django.db import migrations, models


class Migration(migrations.Migration):

    dependencies = [
        ("telemetry", "0013_rollup_bucket_index"),
        ("carbon", "0003_factors_periods"),
    ]

    operations = [
        migrations.SeparateDatabaseAndState(
            database_operations=[],
            state_operations=[
                migrations.CreateModel(
                    name="HostEnergyHour",
                    fields=[
                        ("pk", models.CompositePrimaryKey("host_id", "bucket", blank=True, editable=False, primary_key=True, serialize=False)),
                        ("bucket", models.DateTimeField()),
                        ("cpu_energy_j", models.FloatField(default=0)),
                        ("ram_energy_j", models.FloatField(default=0)),
                        ("cpu_method", models.CharField(max_length=16)),
                        ("ram_method", models.CharField(max_length=16)),
                        ("samples", models.IntegerField(default=0)),
                        ("simulated_samples", models.IntegerField(default=0)),
                        ("host", models.ForeignKey(db_index=False, on_delete=django.db.models.deletion.CASCADE, related_name="+", to="telemetry.host")),
                    ],
                    options={"db_table": "carbon_hostenergyhour"},
                ),
            ],
        ),
    ]
